"""Core records and the environment API. Imports nothing from the rest of the package.

Every name below is imported from its module when first used (PEP 562), so importing a light part of
``core`` (``core.version``, ``core.errors``) does not load pydantic and the record models: that import is
most of the ``palaestra`` command's start-up, and ``palaestra --help`` or ``--version`` never needs it."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOME = {
    "environment": ("Environment", "maybe_await"),
    "errors": ("AgentError", "BadArguments", "ConfigError", "EnvironmentFailure", "InfraError", "InvalidTask",
               "ModelError", "PalaestraError", "ToolError", "UnknownSession", "UnknownTool", "VerifierError"),
    "records": ("SCHEMA_VERSION", "Message", "ModelCallRecord", "Outcome", "Reference", "Rollout", "Task",
                "ToolCall", "ToolCallRecord", "Trajectory", "Usage", "Verdict"),
    "tools": ("ToolSpec", "tool"),
}
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names}

__all__ = [
    "SCHEMA_VERSION", "AgentError", "BadArguments", "ConfigError", "Environment", "EnvironmentFailure",
    "InfraError", "InvalidTask", "Message", "ModelCallRecord", "ModelError", "Outcome", "PalaestraError",
    "Reference", "Rollout", "Task", "ToolCall", "ToolCallRecord", "ToolError", "ToolSpec", "Trajectory",
    "UnknownSession", "UnknownTool", "Usage", "Verdict", "VerifierError", "maybe_await", "tool",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'palaestra.core' has no attribute {name!r}")
    value = getattr(import_module(f"palaestra.core.{module}"), name)
    globals()[name] = value  # the next look-up is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
