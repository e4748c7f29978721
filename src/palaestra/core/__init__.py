"""Core records and the environment API. Imports nothing from the rest of the package."""

from palaestra.core.environment import Environment, maybe_await
from palaestra.core.errors import (
    AgentError,
    BadArguments,
    ConfigError,
    EnvironmentFailure,
    InfraError,
    InvalidTask,
    ModelError,
    PalaestraError,
    ToolError,
    UnknownSession,
    UnknownTool,
    VerifierError,
)
from palaestra.core.records import (
    SCHEMA_VERSION,
    Message,
    ModelCallRecord,
    Outcome,
    Reference,
    Rollout,
    Task,
    ToolCall,
    ToolCallRecord,
    Trajectory,
    Usage,
    Verdict,
)
from palaestra.core.tools import ToolSpec, tool

__all__ = [
    "SCHEMA_VERSION", "AgentError", "BadArguments", "ConfigError", "Environment", "EnvironmentFailure",
    "InfraError", "InvalidTask", "Message", "ModelCallRecord", "ModelError", "Outcome", "PalaestraError",
    "Reference", "Rollout", "Task", "ToolCall", "ToolCallRecord", "ToolError", "ToolSpec", "Trajectory",
    "UnknownSession", "UnknownTool", "Usage", "Verdict", "VerifierError", "maybe_await", "tool",
]
