"""Palaestra: a server-based runtime for evaluating LLM agents in stateful environments.

``palaestra.evaluate`` / ``evaluate_async`` / ``collect`` / ``collect_sync`` (the public API,
``palaestra.api``) are imported on first use, so ``import palaestra`` stays as light as the core records it
always loads."""

from typing import TYPE_CHECKING, Any

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
from palaestra.core.version import __version__

if TYPE_CHECKING:
    from palaestra.api import EvalResult, collect, collect_sync, evaluate, evaluate_async

_API = ("EvalResult", "collect", "collect_sync", "evaluate", "evaluate_async")


def __getattr__(name: str) -> Any:
    """The public API, imported when first named (it pulls in the run machinery)."""
    if name in _API:
        from palaestra import api

        return getattr(api, name)
    raise AttributeError(f"module 'palaestra' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})

__all__ = [
    "Environment", "EvalResult", "Reference", "Rollout", "Task", "ToolCall", "ToolError", "Trajectory", "Verdict",
    "__version__", "collect", "collect_sync", "evaluate", "evaluate_async", "tool",
]
