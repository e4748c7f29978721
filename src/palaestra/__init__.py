"""Palaestra: a server-based runtime for evaluating LLM agents in stateful environments."""

from palaestra.core import (
    Environment,
    Reference,
    Rollout,
    Task,
    ToolCall,
    ToolError,
    Trajectory,
    Verdict,
    tool,
)

__version__ = "0.1.0"

__all__ = [
    "Environment", "Reference", "Rollout", "Task", "ToolCall", "ToolError", "Trajectory", "Verdict",
    "__version__", "tool",
]
