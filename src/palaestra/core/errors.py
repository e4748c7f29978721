"""Typed failures. Every boundary turns exceptions into one of these so a rollout can record *why* it
failed (and whose fault it was) instead of scoring an infrastructure problem as a reward of 0."""

from __future__ import annotations

from typing import Any, Literal

FailureKind = Literal["model", "environment", "sandbox", "agent", "verifier", "judge", "timeout"]


class PalaestraError(Exception):
    """Base error: carries a machine-readable ``kind`` and a hint that tells the user what to do next."""

    kind: str = "error"

    def __init__(self, message: str, *, kind: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind
        self.hint = hint

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.hint:
            out["hint"] = self.hint
        return out

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ToolError(PalaestraError):
    """Raised by a tool to answer the model with an error it can read and recover from.

    It is part of the conversation, not an infrastructure failure: the rollout continues.
    """

    kind = "tool_error"


class UnknownTool(PalaestraError):
    kind = "unknown_tool"


class BadArguments(PalaestraError):
    kind = "bad_arguments"


class UnknownSession(PalaestraError):
    kind = "unknown_session"


class SessionLimit(PalaestraError):
    kind = "session_limit"


class InvalidTask(PalaestraError):
    kind = "invalid_task"


class ConfigError(PalaestraError):
    kind = "config"


class InfraError(PalaestraError):
    """An infrastructure failure: the rollout is ``failed(kind)``, never scored."""

    def __init__(self, failure: FailureKind, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, kind=failure, hint=hint)
        self.failure: FailureKind = failure


class ModelError(InfraError):
    def __init__(self, message: str, *, hint: str | None = None, status: int | None = None) -> None:
        super().__init__("model", message, hint=hint)
        self.status = status


class EnvironmentFailure(InfraError):
    """``cause``: the environment's own error kind behind the failure. ``session_limit`` (every session is
    taken) is back-pressure, which the rollout runner waits out instead of failing the rollout."""

    def __init__(self, message: str, *, hint: str | None = None, cause: str = "environment") -> None:
        super().__init__("environment", message, hint=hint)
        self.cause = cause


class VerifierError(InfraError):
    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__("verifier", message, hint=hint)


class AgentError(InfraError):
    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__("agent", message, hint=hint)
