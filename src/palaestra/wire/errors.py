"""The one error codec of every Palaestra wire: the JSON envelope ``{"error": {"kind", "message", "hint"?}}``
is built here, its HTTP status is chosen here, and an envelope that comes back is turned into a typed
exception here. Servers, clients and the non-HTTP transports (in-process host, supervised process, Ray
actor) all go through these functions, so one fault gets one failure kind wherever the environment runs.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from palaestra.core.errors import (
    BadArguments,
    EnvironmentFailure,
    InfraError,
    InvalidTask,
    PalaestraError,
    SessionLimit,
    UnknownSession,
    UnknownTool,
    VerifierError,
)

# Errors that concern the model's tool call: they go back to the model as a tool message, never fail a rollout.
CALL_ERRORS = frozenset({"unknown_tool", "bad_arguments", "tool_error", "tool_exception"})
# Errors of the environment's own bookkeeping: the rollout is failed(environment) and retried.
ENVIRONMENT_ERRORS = frozenset({"environment", "unknown_session", "session_limit"})
# Failure kinds that travel as they are (core/errors.py FailureKind).
_INFRA_KINDS = frozenset({"judge", "sandbox", "model", "agent", "timeout"})

_STATUS: dict[type[PalaestraError], int] = {
    UnknownSession: 404,
    UnknownTool: 404,
    BadArguments: 422,
    InvalidTask: 422,
    SessionLimit: 429,
}


class WireError(Exception):
    """An environment answered an error: the envelope's inner object and the status it came with. Raised
    by every client transport and turned into a typed exception by ``exception_for`` alone."""

    def __init__(self, detail: dict[str, Any], status: int | None = None) -> None:
        super().__init__(str(detail.get("message") or detail))
        self.detail = detail
        self.status = status


class ErrorDetail(BaseModel):
    """What went wrong (``kind``: machine-readable), in words, and what to do next."""

    kind: str
    message: str
    hint: str | None = None


class ErrorEnvelope(BaseModel):
    """Every error answer of every Palaestra server: a 4xx/5xx status with this body, never a stack."""

    error: ErrorDetail


def error_detail(kind: str, message: str, hint: str | None = None, **extra: Any) -> dict[str, Any]:
    """The inner object of the envelope; ``extra`` adds fields a dialect needs (Anthropic's ``type``)."""
    err: dict[str, Any] = {"kind": kind, **extra, "message": message}
    if hint:
        err["hint"] = hint
    return err


def error_body(kind: str, message: str, hint: str | None = None, **extra: Any) -> dict[str, Any]:
    """The envelope as a dict: ``{"error": {...}}``."""
    return {"error": error_detail(kind, message, hint, **extra)}


def error_bytes(kind: str, message: str, hint: str | None = None) -> bytes:
    """The envelope as JSON bytes, for raw ASGI middleware that answers before any framework runs."""
    return orjson.dumps(error_body(kind, message, hint))


def exception_body(exc: PalaestraError) -> dict[str, Any]:
    """The envelope of a typed exception."""
    return {"error": exc.to_dict()}


def status_for(exc: PalaestraError) -> int:
    """The HTTP status an exception is answered with: client faults 4xx, infrastructure failures 5xx."""
    for cls in type(exc).__mro__:
        status = _STATUS.get(cls)
        if status is not None:
            return status
    if exc.kind in ("bad_request", "invalid_task"):
        return 400
    return 500


def validation_message(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())


def unexpected(exc: BaseException) -> tuple[dict[str, Any], int]:
    """An exception that is not a PalaestraError: a body that fails validation is the caller's fault (422);
    anything else is an environment bug (environment, 500, its first words)."""
    if isinstance(exc, ValidationError):
        return error_detail("bad_request", validation_message(exc), "fix the named fields"), 422
    return error_detail("environment", f"{type(exc).__name__}: {exc}"[:2000]), 500


def wire_error(exc: BaseException) -> WireError:
    """Any exception raised in an in-process environment, as the error a server would have answered."""
    if isinstance(exc, PalaestraError):
        return WireError(exc.to_dict(), status_for(exc))
    return WireError(*unexpected(exc))


def detail_of(payload: Any) -> dict[str, Any]:
    """The error object of an answer body, whatever shape the server sent (a bare string, no envelope)."""
    err = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(err, dict):
        return err
    return {"kind": "environment", "message": str(payload)[:500]}


def exception_for(err: dict[str, Any], status: int | None = None, *, where: str = "") -> PalaestraError:
    """THE mapping from a wire error to a typed exception (and so to a failure kind).

    ``status`` is the HTTP status (or the one ``status_for`` gave on a non-HTTP transport); a 5xx of a kind
    this codec does not know is the environment's failure. ``where`` prefixes environment failures with
    the operation, so the message says which call failed."""
    kind = str(err.get("kind") or "environment")
    message = str(err.get("message") or "")
    hint = err.get("hint")
    hint = str(hint) if hint else None
    if kind == "verifier":
        return VerifierError(message, hint=hint)
    if kind in _INFRA_KINDS:
        return InfraError(kind, message, hint=hint)  # type: ignore[arg-type]
    if kind == "invalid_task":
        return InvalidTask(message, hint=hint)
    if kind in CALL_ERRORS:
        return PalaestraError(message, kind=kind, hint=hint)
    if kind in ENVIRONMENT_ERRORS or (status is not None and status >= 500):
        return EnvironmentFailure(f"{where}: {kind}: {message}" if where else f"{kind}: {message}", hint=hint,
                                  cause=kind)
    return PalaestraError(message, kind=kind, hint=hint)


def tool_arguments(raw: Any, name: str) -> dict[str, Any]:
    """A tool call's arguments as the model sent them (a JSON string, bytes, a dict, nothing) → one JSON
    object, or ``BadArguments`` saying why not. Every transport parses arguments with this function."""
    if raw is None or raw == b"" or raw == "":
        return {}  # no arguments at all: a tool without parameters (whitespace is not JSON: refused, as a body)
    if isinstance(raw, (str, bytes)):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadArguments(f"arguments for tool '{name}' are not valid JSON ({exc})",
                               hint="send the tool's arguments as one JSON object") from None
    if not isinstance(raw, dict):
        raise BadArguments(f"arguments for tool '{name}' must be a JSON object, got {type(raw).__name__}",
                           hint="send the tool's arguments as one JSON object ({} for none)")
    return raw
