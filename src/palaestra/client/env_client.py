"""The typed environment client. It speaks HTTP over an injectable httpx transport, so the same code
drives an in-process ASGI app (no socket) and a server in another process or on another machine."""

from __future__ import annotations

from typing import Any, Protocol

import httpx
import orjson

from palaestra.core.errors import (
    EnvironmentFailure,
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
    """Environment client over HTTP. ``transport`` may be ``httpx.ASGITransport(app)`` for in-process."""

    def __init__(
        self,
        base_url: str,
        *,
        name: str = "",
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 60.0,
        max_connections: int = 1024,
        token: str | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            timeout=timeout,
            headers=headers,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def _request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None) -> Any:
        content = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
        try:
            resp = await self._http.request(method, path, content=content)
        except httpx.TimeoutException as exc:
            raise EnvironmentFailure(
                f"environment '{self.name}' at {self.base_url} timed out on {method} {path}",
                hint="the tool or verifier took too long; raise the timeout or fix the environment",
            ) from exc
        except httpx.TransportError as exc:
            raise EnvironmentFailure(
                f"environment '{self.name}' at {self.base_url} unreachable on {method} {path}: {exc!r}",
                hint="is the environment server running? check its log",
            ) from exc
        try:
            data = orjson.loads(resp.content) if resp.content else None
        except orjson.JSONDecodeError:
            raise EnvironmentFailure(
                f"environment '{self.name}' answered {resp.status_code} with a non-JSON body on {method} {path}: "
                f"{resp.text[:200]!r}"
            ) from None
        if resp.status_code >= 400:
            err = (data or {}).get("error") if isinstance(data, dict) else None
            err = err if isinstance(err, dict) else {"kind": "environment", "message": str(data)[:500]}
            raise _error_from(err, resp.status_code, f"{method} {path}")
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
        raw = arguments.encode() if isinstance(arguments, str) else orjson.dumps(arguments or {})
        try:
            data = await self._request("POST", f"/sessions/{session_id}/tools/{name}", raw=raw)
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
        await self._http.aclose()


def _error_from(err: dict[str, Any], status: int, where: str) -> PalaestraError:
    kind = str(err.get("kind") or "environment")
    message = str(err.get("message") or "")
    hint = err.get("hint")
    if kind == "verifier":
        return VerifierError(message, hint=hint)
    if kind == "invalid_task":
        return InvalidTask(message, hint=hint)
    if kind in _CALL_ERRORS:
        return PalaestraError(message, kind=kind, hint=hint)
    if status >= 500 or kind in ("unknown_session", "session_limit", "environment"):
        return EnvironmentFailure(f"{where}: {message}", hint=hint)
    return PalaestraError(message, kind=kind, hint=hint)
