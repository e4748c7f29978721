"""The typed environment client. It speaks HTTP over an injectable httpx transport, so the same code
drives an in-process ASGI app (no socket) and a server in another process or on another machine."""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import quote

import orjson

from palaestra.client.transport import AsgiTransport, NetworkTransport, Transport, TransportFailure
from palaestra.core.errors import (
    EnvironmentFailure,
    InfraError,
    InvalidTask,
    PalaestraError,
    VerifierError,
)
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.wire.env import SessionHandle, ToolResult


class EnvClient(Protocol):
    """What the orchestrator needs from an environment, wherever it runs."""

    name: str

    async def info(self) -> dict[str, Any]: ...
    async def open(self, task: Task) -> SessionHandle: ...
    async def call_tool(self, session_id: str, name: str, arguments: Any) -> ToolResult: ...
    async def verify(self, session_id: str, trajectory: Trajectory) -> Verdict: ...
    async def verify_stateless(self, task: Task, trajectory: Trajectory) -> Verdict: ...
    async def reference(self, task: Task) -> Reference | None: ...
    async def close(self, session_id: str) -> None: ...
    async def aclose(self) -> None: ...


# Errors that concern the model's tool call: they go back to the model as a tool message.
_CALL_ERRORS = {"unknown_tool", "bad_arguments", "tool_error", "tool_exception"}


class HttpEnvClient:
    """Environment client over HTTP: pass ``base_url`` for a server, or ``app`` for an in-process ASGI app."""

    def __init__(
        self,
        base_url: str = "http://inprocess",
        *,
        name: str = "",
        app: Any = None,
        timeout: float = 60.0,
        max_connections: int = 1024,
        token: str | None = None,
    ) -> None:
        self.name = name
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._t: Transport = (AsgiTransport(app, timeout=timeout, headers=headers) if app is not None else
                              NetworkTransport(base_url, timeout=timeout, max_connections=max_connections,
                                               headers=headers))
        self.base_url = self._t.base_url

    async def _request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None) -> Any:
        content = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
        try:
            status, payload = await self._t.request(method, path, content)
        except TransportFailure as exc:
            if exc.kind == "timeout":
                raise EnvironmentFailure(
                    f"environment '{self.name}' at {self.base_url} timed out on {method} {path}",
                    hint="the tool or verifier took too long; raise the timeout or fix the environment",
                ) from exc
            raise EnvironmentFailure(
                f"environment '{self.name}' at {self.base_url} unreachable on {method} {path}: {exc.detail}",
                hint="is the environment server running? check its log",
            ) from exc
        try:
            data = orjson.loads(payload) if payload else None
        except orjson.JSONDecodeError:
            raise EnvironmentFailure(
                f"environment '{self.name}' answered {status} with a non-JSON body on {method} {path}: "
                f"{payload[:200]!r}"
            ) from None
        if status >= 400:
            err = (data or {}).get("error") if isinstance(data, dict) else None
            err = err if isinstance(err, dict) else {"kind": "environment", "message": str(data)[:500]}
            raise _error_from(err, status, f"{method} {path}")
        return data

    async def info(self) -> dict[str, Any]:
        data = await self._request("GET", "/info")
        if not self.name:
            self.name = data.get("name", "")
        return dict(data)

    async def open(self, task: Task) -> SessionHandle:
        data = await self._request("POST", "/sessions", {"task": task.model_dump(mode="json")})
        return SessionHandle.from_dict(data)

    async def call_tool(self, session_id: str, name: str, arguments: Any) -> ToolResult:
        """Call a tool. ``arguments`` may be a dict or the model's raw JSON string (sent as it is, so a
        malformed string is reported by the server exactly as the model wrote it)."""
        if not name or "/" in name or name in (".", ".."):  # could not name a tool, and would change the route
            return ToolResult(error={"kind": "unknown_tool", "message": f"unknown tool {name!r}"})
        raw = arguments.encode() if isinstance(arguments, str) else orjson.dumps(arguments or {})
        path = f"/sessions/{quote(session_id, safe='')}/tools/{quote(name, safe='')}"
        try:
            data = await self._request("POST", path, raw=raw)
        except PalaestraError as exc:
            if exc.kind in _CALL_ERRORS:
                return ToolResult(error=exc.to_dict())
            raise
        return ToolResult(output=data.get("output"), error=data.get("error"))

    async def verify(self, session_id: str, trajectory: Trajectory) -> Verdict:
        data = await self._request(
            "POST", f"/sessions/{session_id}/verify", {"trajectory": trajectory.model_dump(mode="json")}
        )
        return Verdict.model_validate(data)

    async def verify_stateless(self, task: Task, trajectory: Trajectory) -> Verdict:
        data = await self._request(
            "POST", "/verify",
            {"task": task.model_dump(mode="json"), "trajectory": trajectory.model_dump(mode="json")},
        )
        return Verdict.model_validate(data)

    async def reference(self, task: Task) -> Reference | None:
        data = await self._request("POST", "/reference", {"task": task.model_dump(mode="json")})
        return Reference.model_validate(data) if data else None

    async def close(self, session_id: str) -> None:
        await self._request("DELETE", f"/sessions/{session_id}")

    async def health(self) -> dict[str, Any]:
        return dict(await self._request("GET", "/healthz"))

    async def aclose(self) -> None:
        await self._t.aclose()


def _error_from(err: dict[str, Any], status: int, where: str) -> PalaestraError:
    kind = str(err.get("kind") or "environment")
    message = str(err.get("message") or "")
    hint = err.get("hint")
    if kind == "verifier":
        return VerifierError(message, hint=hint)
    if kind in ("judge", "sandbox", "model", "agent"):
        return InfraError(kind, message, hint=hint)  # type: ignore[arg-type]
    if kind == "invalid_task":
        return InvalidTask(message, hint=hint)
    if kind in _CALL_ERRORS:
        return PalaestraError(message, kind=kind, hint=hint)
    if status >= 500 or kind in ("unknown_session", "session_limit", "environment"):
        return EnvironmentFailure(f"{where}: {message}", hint=hint)
    return PalaestraError(message, kind=kind, hint=hint)
