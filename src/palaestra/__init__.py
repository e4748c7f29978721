"""Palaestra: a server-based runtime for evaluating LLM agents in stateful environments.

``palaestra.evaluate`` / ``evaluate_async`` / ``collect`` / ``collect_sync`` (the public API,
``palaestra.api``) and the core records (``palaestra.Task``, ``Rollout``, ...) are imported on first use, so
``import palaestra`` loads neither pydantic nor the run machinery."""

from typing import TYPE_CHECKING, Any

from palaestra.core.version import __version__

if TYPE_CHECKING:
    from palaestra.api import EvalResult, collect, collect_sync, evaluate, evaluate_async
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

_API = ("EvalResult", "collect", "collect_sync", "evaluate", "evaluate_async")
_CORE = ("Environment", "Reference", "Rollout", "Task", "ToolCall", "ToolError", "Trajectory", "Verdict", "tool")


def __getattr__(name: str) -> Any:
    """The public API and the core records, imported when first named: the API pulls in the run machinery,
    the records pydantic, and neither is needed to start the command line."""
    if name in _API:
        from palaestra import api

        return getattr(api, name)
    if name in _CORE:
        from palaestra import core

        return getattr(core, name)
    raise AttributeError(f"module 'palaestra' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API, *_CORE})

__all__ = [
    "Environment", "EvalResult", "Reference", "Rollout", "Task", "ToolCall", "ToolError", "Trajectory", "Verdict",
    "__version__", "collect", "collect_sync", "evaluate", "evaluate_async", "tool",
]
