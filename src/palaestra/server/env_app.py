"""The environment server: DESIGN §1's HTTP surface over an ``EnvironmentHost``.

Plain Starlette routes (not FastAPI) keep per-request overhead low; every error is a JSON body with a
4xx/5xx status and a hint, never a stack trace."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from palaestra.core.environment import Environment
from palaestra.core.errors import PalaestraError
from palaestra.core.records import Task, Trajectory
from palaestra.server.http import JSON, error_response, from_exception, read_json
from palaestra.server.openapi import openapi_document
from palaestra.server.sessions import EnvironmentHost
from palaestra.wire.errors import status_for, tool_arguments, unexpected


class _NotAnObject(PalaestraError):
    """Well-formed JSON that is not the object a route takes (a JSON ``null`` included): 422, as the tool
    route answers such arguments."""

    kind = "bad_request"


class _ToolNameConvertor(Convertor[str]):
    """A tool name is whatever the model wrote: any characters, newlines and other control characters
    included. Starlette's ``path`` convertor is ``.*`` before the route's ``$`` (no DOTALL), so a name with
    a newline missed the tool route (a bare 404 the client took for a broken environment) or matched a
    shorter one (``'add\\n'`` ran the real tool ``add``). This one matches every name, so every name reaches
    the host, which answers one it does not know with the structured 404 ``unknown_tool`` naming the
    available tools."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("tool_name", _ToolNameConvertor())

_JSON_TYPES = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
               list: "an array"}

Handler = Callable[[Request], Awaitable[Response]]


def _guard(fn: Handler) -> Handler:
    """Turn every failure into a JSON error with the codec's status (``wire.errors``): the in-process
    transports answer the same statuses, so a fault is one failure kind on every placement."""

    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except _NotAnObject as exc:
            return from_exception(exc, 422)
        except PalaestraError as exc:
            return from_exception(exc, status_for(exc))
        except Exception as exc:  # a body that fails validation (422), or the last resort: JSON, no stack
            detail, status = unexpected(exc)
            return JSON({"error": detail}, status_code=status)

    return wrapped


def _obj(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise PalaestraError(f"{what}: expected a JSON object", kind="bad_request")
    return body


def _trajectory(body: dict[str, Any]) -> Trajectory:
    """Only an absent trajectory means an empty one; anything but an object is the client's error."""
    if "trajectory" not in body:
        return Trajectory()
    if not isinstance(body["trajectory"], dict):
        raise PalaestraError("field 'trajectory' must be a JSON object", kind="bad_request",
                             hint='send {"trajectory": {"messages": [...], "tool_calls": [...], ...}}')
    return Trajectory.model_validate(body["trajectory"])


def create_env_app(host: EnvironmentHost | Environment, *, reap_interval_s: float = 60.0) -> Starlette:
    """Build the ASGI app for an environment (or an existing host, to share its sessions)."""
    if isinstance(host, Environment):
        host = EnvironmentHost(host)
    h: EnvironmentHost = host

    async def open_session(request: Request) -> Response:
        body = _obj(await read_json(request, "POST /sessions"), "POST /sessions")
        if "task" not in body:
            raise PalaestraError("POST /sessions: missing field 'task'", kind="bad_request",
                                 hint='send {"task": {...}}')
        task = Task.model_validate(body["task"])
        return JSON(await h.open(task))

    async def call_tool(request: Request) -> Response:
        sid, name = request.path_params["sid"], request.path_params["name"]
        h.get(sid)
        args = tool_arguments(await request.body(), name)  # no body at all: a tool without arguments
        result = await h.call_tool(sid, name, args)
        return JSON(result.to_dict())

    async def verify(request: Request) -> Response:
        sid = request.path_params["sid"]
        what = "POST /sessions/{id}/verify"
        if not await request.body():  # no body at all: verify an empty trajectory
            traj = Trajectory()
        else:  # a body is an object; a JSON null is not "no body" (read_json gives None for both)
            body = await read_json(request, what)
            if not isinstance(body, dict):
                got = _JSON_TYPES.get(type(body), "another JSON value")
                raise _NotAnObject(f"{what}: the body must be a JSON object, got {got}",
                                   hint='send {"trajectory": {"messages": [...], ...}}, or no body at all to '
                                        "verify an empty trajectory")
            traj = _trajectory(body)
        verdict = await h.verify(sid, traj)
        return JSON(verdict.model_dump(mode="json"))

    async def delete_session(request: Request) -> Response:
        closed = await h.close(request.path_params["sid"])
        return JSON({"closed": closed})

    async def verify_stateless(request: Request) -> Response:
        body = _obj(await read_json(request, "POST /verify"), "POST /verify")
        if "task" not in body:
            raise PalaestraError("POST /verify: missing field 'task'", kind="bad_request")
        task = Task.model_validate(body["task"])
        traj = _trajectory(body)
        verdict = await h.verify_stateless(task, traj)
        return JSON(verdict.model_dump(mode="json"))

    async def reference(request: Request) -> Response:
        body = _obj(await read_json(request, "POST /reference"), "POST /reference")
        ref = h.env.reference(Task.model_validate(body.get("task") or {}))
        return JSON(ref.model_dump(mode="json") if ref is not None else None)

    async def info(request: Request) -> Response:
        return JSON(h.env.info())

    async def openapi(request: Request) -> Response:
        return JSON(openapi_document(h.env.name, h.env.version))

    async def healthz(request: Request) -> Response:
        return JSON({"status": "ok", "env": h.env.name, "sessions": len(h.sessions), "closed": h.closed_total})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def reaper() -> None:
            while True:
                await asyncio.sleep(reap_interval_s)
                await h.reap()

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            await h.close_all()

    routes = [
        Route("/sessions", _guard(open_session), methods=["POST"]),
        Route("/sessions/{sid}/tools/{name:tool_name}", _guard(call_tool), methods=["POST"]),
        Route("/sessions/{sid}/verify", _guard(verify), methods=["POST"]),
        Route("/sessions/{sid}", _guard(delete_session), methods=["DELETE"]),
        Route("/verify", _guard(verify_stateless), methods=["POST"]),
        Route("/reference", _guard(reference), methods=["POST"]),
        Route("/info", _guard(info), methods=["GET"]),
        Route("/healthz", _guard(healthz), methods=["GET"]),
        Route("/openapi.json", _guard(openapi), methods=["GET"]),
    ]
    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        kind = "not_found" if status == 404 else "bad_request"
        return error_response(kind, f"{request.method} {request.url.path}: no such endpoint", status,
                              "see GET /openapi.json for the environment server's routes")

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_found})
    app.router.redirect_slashes = False  # a redirect is no answer for an API client: 404 JSON instead
    app.state.host = h
    return app
