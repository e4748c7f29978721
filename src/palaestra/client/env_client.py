"""The environment client: one class, whatever carries its calls.

``EnvClient`` turns the environment protocol (DESIGN §1) into typed calls and every failure into a typed
exception through the one error codec (``wire/errors.py``). How a call travels is its ``EnvTransport``:
HTTP to a server (``HttpTransport``, over the network or into an in-process ASGI app, in this module), or,
in ``placement/``, straight into an in-process host, through a supervised local process, or to a Ray actor.
A transport answers a result or raises ``WireError`` (the environment answered an error) or
``TransportFailure`` (no answer); the client alone decides what each means, so the same fault is the same
failure kind on every placement."""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import quote

import orjson

from palaestra.client.transport import AsgiTransport, NetworkTransport, Transport, TransportFailure
from palaestra.core.errors import EnvironmentFailure, PalaestraError
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.wire.env import SessionHandle, ToolResult
from palaestra.wire.errors import CALL_ERRORS, WireError, detail_of, error_detail, exception_for

# The operations of the environment role; every transport serves each of them.
OPS = ("info", "open", "call_tool", "verify", "verify_stateless", "reference", "close", "health")


class EnvTransport(Protocol):
    """One way to reach an environment. ``request`` runs one operation of ``OPS`` with keyword arguments
    (``task``, ``session_id``, ``name``, ``arguments``, ``trajectory``) and returns its result (a JSON
    dict, or the typed object itself on an in-process transport)."""

    where: str  # for messages: a URL, "in-process host", "ray replicas"

    async def request(self, op: str, **args: Any) -> Any: ...
    async def aclose(self) -> None: ...


class EnvClient:
    """What the orchestrator and agents use to talk to an environment, wherever it runs."""

    def __init__(self, transport: EnvTransport, *, name: str = "") -> None:
        self.transport = transport
        self.name = name

    @classmethod
    def http(cls, base_url: str = "http://inprocess", *, name: str = "", app: Any = None, timeout: float = 60.0,
             max_connections: int = 1024, token: str | None = None) -> EnvClient:
        """Over HTTP: ``base_url`` for a server, or ``app`` for an ASGI app in this process (no socket)."""
        return cls(HttpTransport(base_url, app=app, timeout=timeout, max_connections=max_connections, token=token),
                   name=name)

    @property
    def base_url(self) -> str:
        return self.transport.where

    async def _do(self, op: str, **args: Any) -> Any:
        try:
            return await self.transport.request(op, **args)
        except WireError as exc:
            raise exception_for(exc.detail, exc.status, where=f"environment '{self.name}' {op}") from None
        except TransportFailure as exc:
            where = f"environment '{self.name}' at {self.transport.where}"
            if exc.kind == "timeout":
                raise EnvironmentFailure(
                    f"{where} timed out on {op}: {exc.detail}",
                    hint=exc.hint or "the tool or verifier took too long; raise the timeout or fix the environment",
                ) from exc
            raise EnvironmentFailure(f"{where} unreachable on {op}: {exc.detail}",
                                     hint=exc.hint or "is the environment server running? check its log") from exc

    async def info(self) -> dict[str, Any]:
        data = dict(await self._do("info"))
        if not self.name:
            self.name = str(data.get("name", ""))
        return data

    async def open(self, task: Task) -> SessionHandle:
        data = await self._do("open", task=task)
        return data if isinstance(data, SessionHandle) else SessionHandle.from_dict(data)

    async def call_tool(self, session_id: str, name: str, arguments: Any) -> ToolResult:
        """Call a tool. ``arguments`` may be a dict or the model's raw JSON string (sent as it is, so a
        malformed string is reported exactly as the model wrote it). A fault of the call itself (unknown
        tool, bad arguments) is the model's: it comes back as the result's error, not as an exception."""
        try:
            data = await self._do("call_tool", session_id=session_id, name=name, arguments=arguments)
        except PalaestraError as exc:
            if exc.kind in CALL_ERRORS:
                return ToolResult(error=exc.to_dict())
            raise
        if isinstance(data, ToolResult):
            return data
        return ToolResult(output=data.get("output"), error=data.get("error"))

    async def verify(self, session_id: str, trajectory: Trajectory) -> Verdict:
        data = await self._do("verify", session_id=session_id, trajectory=trajectory)
        return data if isinstance(data, Verdict) else Verdict.model_validate(data)

    async def verify_stateless(self, task: Task, trajectory: Trajectory) -> Verdict:
        data = await self._do("verify_stateless", task=task, trajectory=trajectory)
        return data if isinstance(data, Verdict) else Verdict.model_validate(data)

    async def reference(self, task: Task) -> Reference | None:
        data = await self._do("reference", task=task)
        return data if data is None or isinstance(data, Reference) else Reference.model_validate(data)

    async def close(self, session_id: str) -> None:
        await self._do("close", session_id=session_id)

    async def health(self) -> dict[str, Any]:
        return dict(await self._do("health"))

    async def aclose(self) -> None:
        await self.transport.aclose()


def HttpEnvClient(base_url: str = "http://inprocess", *, name: str = "", app: Any = None,
                  timeout: float = 60.0, max_connections: int = 1024, token: str | None = None) -> EnvClient:
    """Kept for callers of the former HTTP-only class: ``EnvClient.http(...)``."""
    return EnvClient.http(base_url, name=name, app=app, timeout=timeout, max_connections=max_connections,
                          token=token)


def _sid(session_id: str) -> str:
    return quote(session_id, safe="")


def _task(args: dict[str, Any]) -> dict[str, Any]:
    return {"task": args["task"].model_dump(mode="json")}


def _traj(args: dict[str, Any]) -> dict[str, Any]:
    return {"trajectory": args["trajectory"].model_dump(mode="json")}


class HttpTransport:
    """The environment protocol over HTTP (DESIGN §1's routes), to a server or an in-process ASGI app."""

    def __init__(self, base_url: str = "http://inprocess", *, app: Any = None, timeout: float = 60.0,
                 max_connections: int = 1024, token: str | None = None) -> None:
        headers = {"content-type": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._t: Transport = (AsgiTransport(app, timeout=timeout, headers=headers) if app is not None else
                              NetworkTransport(base_url, timeout=timeout, max_connections=max_connections,
                                               headers=headers))
        self.where = self._t.base_url

    def _route(self, op: str, a: dict[str, Any]) -> tuple[str, str, bytes | None]:
        if op == "info":
            return "GET", "/info", None
        if op == "health":
            return "GET", "/healthz", None
        if op == "open":
            return "POST", "/sessions", orjson.dumps(_task(a))
        if op == "call_tool":
            args = a["arguments"]
            raw = args.encode() if isinstance(args, str) else orjson.dumps(args or {})
            return "POST", f"/sessions/{_sid(a['session_id'])}/tools/{quote(a['name'], safe='')}", raw
        if op == "verify":
            return "POST", f"/sessions/{_sid(a['session_id'])}/verify", orjson.dumps(_traj(a))
        if op == "verify_stateless":
            return "POST", "/verify", orjson.dumps({**_task(a), **_traj(a)})
        if op == "reference":
            return "POST", "/reference", orjson.dumps(_task(a))
        if op == "close":
            return "DELETE", f"/sessions/{_sid(a['session_id'])}", None
        raise ValueError(f"unknown environment operation {op!r}")

    async def request(self, op: str, **args: Any) -> Any:
        if op == "call_tool":
            name = args["name"]
            if not name or "/" in name or name in (".", ".."):  # names no tool, and would change the route
                raise WireError(error_detail("unknown_tool", f"unknown tool {name!r}"), 404)
        method, path, content = self._route(op, args)
        status, payload = await self._t.request(method, path, content)
        try:
            data = orjson.loads(payload) if payload else None
        except orjson.JSONDecodeError:
            raise WireError(error_detail("environment", f"answered {status} with a non-JSON body on {method} "
                                         f"{path}: {payload[:200]!r}"), max(status, 500)) from None
        if status >= 400:
            raise WireError(detail_of(data), status)
        return data

    async def aclose(self) -> None:
        await self._t.aclose()
