"""A Palaestra environment served AS an OpenEnv environment server, so OpenEnv's own clients (its
``EnvClient`` subclasses, ``GenericEnvClient``, ``MCPToolClient``) and everything built on them (TRL's
OpenEnv integration) can train or evaluate on it without any Palaestra code on their side.

The protocol is the one OpenEnv's client speaks, read from its client package: an episode lives on one
WebSocket at ``/ws``; the client sends ``{"type": "reset", "data": {...}}``, ``{"type": "step", "data":
ACTION}``, ``{"type": "state"}`` and ``{"type": "close"}``, and reads back ``{"type": "observation",
"data": {"observation", "reward", "done"}}``, ``{"type": "state", "data": {...}}`` or ``{"type": "error",
"data": {"message", "code"}}`` (which the client raises as ``RuntimeError``). Beside it: ``GET /health``,
``GET /metadata``, ``GET /schema`` and ``POST /mcp``, JSON-RPC as OpenEnv's production mode speaks it
(``MCPToolClient``'s default): ``openenv/session/create`` makes a session that ``/ws?session_id=`` then
attaches to, ``tools/list`` and ``tools/call`` act in that session's episode, ``openenv/session/close``
ends it.

How a Palaestra episode maps onto it:

- ``reset(task_id=..., index=..., seed=..., task={...})`` opens one Palaestra session on a task (by id,
  by position, ``seed`` modulo the task count, a whole task row, or with none of them the next task in
  turn); the observation holds the prompt messages and the tools;
- a tool call is OpenEnv's MCP action (RFC 003), ``{"type": "call_tool", "tool_name", "arguments"}``,
  answered like a ``CallToolObservation`` (``tool_name``, ``result``, ``error``), reward 0, not done;
  ``{"type": "list_tools"}`` lists the tools. A mistake of the model (unknown tool, bad arguments, a
  tool's own error) is an ``error`` in the observation, as OpenEnv answers it; the episode goes on;
- the final answer is ``{"answer": TEXT}`` (or the ``submit_answer`` tool): the environment's verifier
  grades the episode's trajectory, the reward is the verdict's, ``done`` is true and the observation
  carries the verdict;
- an infrastructure failure (the verifier or a sandbox broke, the session cap is reached) is an error
  frame naming the failure kind, never a reward of 0.

Served behind :func:`palaestra.server.security.secure` like every Palaestra server (``env serve
--openenv``): Host and Origin checked, and a bearer token, which OpenEnv's clients send with
``headers={"Authorization": "Bearer ..."}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from palaestra.core import ids
from palaestra.core.records import Task
from palaestra.server.http import JSON
from palaestra.server.openenv_episodes import (
    ACTION_SCHEMA,
    OBSERVATION_SCHEMA,
    STATE_SCHEMA,
    SUBMIT_TOOL,
    Episode,
    OpenEnvEpisodes,
    Refused,
    openenv_tools,
)
from palaestra.server.sessions import EnvironmentHost

__all__ = ["SUBMIT_TOOL", "create_openenv_app"]

_RPC_SERVER_ERROR, _RPC_INVALID_PARAMS, _RPC_NO_METHOD = -32000, -32602, -32601


@dataclass
class FaceSession:
    """What one OpenEnv client holds: its current episode (replaced by each reset), reached from its
    WebSocket and, in production mode, from ``/mcp`` by id; one message at a time."""

    id: str
    episode: Episode | None = None
    attached: bool = False
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class OpenEnvFace:
    """The transport: WebSocket episodes and JSON-RPC ``/mcp`` over :class:`OpenEnvEpisodes`."""

    def __init__(self, host: EnvironmentHost, tasks: Sequence[Task]) -> None:
        self.episodes = OpenEnvEpisodes(host, tasks)
        self.host = host
        self.sessions: dict[str, FaceSession] = {}  # production-mode sessions, made by openenv/session/create

    async def reap(self) -> None:
        """Drop production-mode sessions nobody has used for the host's TTL (a client that never closed)."""
        cutoff = time.monotonic() - self.host.ttl_s
        for session in [s for s in self.sessions.values() if not s.attached and s.last_used < cutoff]:
            del self.sessions[session.id]
            await self.end(session)

    async def end(self, session: FaceSession) -> None:
        episode, session.episode = session.episode, None
        await self.episodes.end(episode)

    async def handle(self, session: FaceSession, kind: Any, data: Any) -> dict[str, Any]:
        """One WebSocket message (reset, step, state) -> the frame that answers it."""
        async with session.lock:
            if kind == "reset":
                await self.end(session)
                session.episode, reply = await self.episodes.reset(data if isinstance(data, dict) else {})
                return {"type": "observation", "data": reply}
            if kind == "step":
                if session.episode is None:
                    raise Refused("SESSION_ERROR", "no episode: reset() first")
                return {"type": "observation", "data": await self.episodes.step(session.episode, data)}
            if kind == "state":
                return {"type": "state", "data": self.episodes.state(session.episode)}
        raise Refused("UNKNOWN_TYPE", f"unknown message type {str(kind)[:100]!r}")

    async def serve(self, ws: WebSocket) -> None:
        """One client connection. ``?session_id=`` attaches it to a production-mode session (which then
        outlives the socket until ``openenv/session/close``); without it the session is the socket's."""
        await ws.accept()
        wanted = ws.query_params.get("session_id")
        session = self.sessions.get(wanted) if wanted else FaceSession(id=ids.session_id())
        if session is None or session.attached:
            why = "is attached to another socket" if session else "is unknown (create it with openenv/session/create)"
            await _send(ws, {"type": "error", "data": {"message": f"session {wanted!r} {why}",
                                                       "code": "SESSION_ERROR"}})
            await ws.close()
            return
        session.attached = True
        try:
            while True:
                try:
                    raw = await ws.receive_text()
                except (WebSocketDisconnect, RuntimeError):
                    return
                try:
                    message = orjson.loads(raw)
                    if not isinstance(message, dict):
                        raise Refused("INVALID_JSON", "a message is a JSON object with a 'type'")
                    if message.get("type") == "close":
                        return
                    await _send(ws, await self.handle(session, message.get("type"), message.get("data")))
                except orjson.JSONDecodeError as exc:
                    await _send(ws, {"type": "error", "data": {"message": f"not JSON: {exc}", "code": "INVALID_JSON"}})
                except Refused as exc:
                    await _send(ws, {"type": "error", "data": {"message": str(exc), "code": exc.code}})
                    if exc.code == "CAPACITY_REACHED":
                        return
                except Exception as exc:  # the environment's own bug (in seed, say): typed, and the socket lives
                    why = f"failed(environment): {type(exc).__name__}: {exc}"[:2000]
                    await _send(ws, {"type": "error", "data": {"message": why, "code": "EXECUTION_ERROR"}})
        finally:
            session.attached = False
            if session.id not in self.sessions:  # the socket's own session ends with it
                await self.end(session)
            with contextlib.suppress(Exception):
                await ws.close()

    # ---- JSON-RPC on /mcp (OpenEnv's production mode) -------------------------------------------
    async def rpc(self, method: Any, params: dict[str, Any]) -> dict[str, Any]:
        """A JSON-RPC method's result; raises :class:`_RpcError` for its error."""
        if method == "openenv/session/create":
            await self.reap()
            if len(self.sessions) >= self.host.max_sessions:
                raise _RpcError(_RPC_SERVER_ERROR, f"{len(self.sessions)} sessions open (cap {self.host.max_sessions})")
            made = FaceSession(id=ids.session_id())
            self.sessions[made.id] = made
            return {"session_id": made.id}
        sid = params.get("session_id")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if sid is not None and session is None:
            raise _RpcError(_RPC_INVALID_PARAMS, f"Unknown session_id: {sid}")
        if session is not None:
            session.last_used = time.monotonic()
        if method == "openenv/session/close":
            if session is None:
                raise _RpcError(_RPC_INVALID_PARAMS, "Invalid params - 'session_id' is required")
            del self.sessions[session.id]
            if session.attached:  # its socket ends it when it closes
                return {"session_id": session.id, "closed": False, "closing": True}
            async with session.lock:
                await self.end(session)
            return {"session_id": session.id, "closed": True}
        if method == "tools/list":
            if session is not None and session.episode is not None:
                return {"tools": session.episode.tools}
            tasks = self.episodes.tasks
            return {"tools": openenv_tools(self.host.tools(tasks[0] if tasks else Task(id="listing")))}
        if method == "tools/call":
            if session is None:
                raise _RpcError(_RPC_INVALID_PARAMS, "tools/call acts in an episode: pass the session_id of "
                                                     "openenv/session/create and reset() on its /ws first")
            return await self.call(session, params.get("name"), params.get("arguments") or {})
        raise _RpcError(_RPC_NO_METHOD, f"method {str(method)[:100]!r} is not served here")

    async def call(self, session: FaceSession, name: Any, arguments: Any) -> dict[str, Any]:
        """``tools/call``: the tool's data (or, for ``submit_answer``, the verdict with its reward); a
        model's mistake or an infrastructure failure is a JSON-RPC error naming it."""
        async with session.lock:
            if session.episode is None:
                raise _RpcError(_RPC_SERVER_ERROR, "no episode in this session: reset() on its /ws first")
            try:
                reply = await self.episodes.step(session.episode, {"type": "call_tool", "tool_name": name,
                                                                   "arguments": arguments})
            except Refused as exc:
                raise _RpcError(_RPC_SERVER_ERROR, f"{exc.code}: {exc}") from None
        obs = reply["observation"]
        if obs.get("error"):
            raise _RpcError(_RPC_SERVER_ERROR, f"{obs['error']['error_type']}: {obs['error']['message']}")
        if reply["done"]:  # the final answer: its verdict, the reward and done beside it
            data = {"reward": reply["reward"], "done": True, "verdict": obs["verdict"]}
            return {"data": data, "content": [{"type": "text", "text": orjson.dumps(data).decode()}],
                    "is_error": False}
        return dict(obs["result"])


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def _send(ws: WebSocket, message: dict[str, Any]) -> None:
    await ws.send_text(orjson.dumps(message, default=str).decode())


def create_openenv_app(host: EnvironmentHost, tasks: Sequence[Task]) -> Starlette:
    """The ASGI app of the OpenEnv face (serve it through ``security.secure``, as ``env serve`` does)."""
    face = OpenEnvFace(host, tasks)
    env = host.env

    async def health(request: Request) -> Response:
        return JSON({"status": "healthy"})

    async def metadata(request: Request) -> Response:
        return JSON({"name": env.name, "description": env.info()["description"], "version": env.version,
                     "readme_content": None, "author": None, "documentation_url": None})

    async def schema(request: Request) -> Response:
        return JSON({"action": ACTION_SCHEMA, "observation": OBSERVATION_SCHEMA, "state": STATE_SCHEMA})

    async def mcp(request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return JSON({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
        rid = body.get("id") if isinstance(body, dict) else None
        params = body.get("params", {}) if isinstance(body, dict) else None
        if not isinstance(params, dict):
            return JSON({"jsonrpc": "2.0", "id": rid, "error": {"code": _RPC_INVALID_PARAMS,
                                                                "message": "Params must be an object"}})
        try:
            result = await face.rpc(body.get("method"), params)
        except _RpcError as exc:
            return JSON({"jsonrpc": "2.0", "id": rid, "error": {"code": exc.code, "message": str(exc)}})
        except Exception as exc:  # the environment's own bug: typed, never a stack trace
            return JSON({"jsonrpc": "2.0", "id": rid, "error": {
                "code": _RPC_SERVER_ERROR, "message": f"failed(environment): {type(exc).__name__}: {exc}"[:2000]}})
        return JSON({"jsonrpc": "2.0", "id": rid, "result": result})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for session in list(face.sessions.values()):
                await face.end(session)
            await host.close_all()

    routes = [Route("/health", health, methods=["GET"]), Route("/metadata", metadata, methods=["GET"]),
              Route("/schema", schema, methods=["GET"]), Route("/mcp", mcp, methods=["POST"]),
              WebSocketRoute("/ws", face.serve)]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.face = face
    return app
