"""``POST /act`` of the agent protocol: run one harness on a session someone else opened.

The caller (a run's ``RemoteAgent``) keeps the rollout: it opened the session and will verify and close
it, and it records the model calls at the model URL it sends (its own proxy, per rollout). This server
only drives the harness: tool calls go to ``env_url`` (with ``env_token``), model calls to
``model_base_url`` (with ``model_api_key``), and the answer is the trajectory. Both URLs must be loopback
or on the server's allow-list, so the server is no relay to arbitrary addresses; the tokens are used for
the calls and never stored or answered back.

A failure is answered as the agent protocol's error envelope with the kind a local run would record, so
the caller can raise the same error: ``model`` and ``environment`` (and the other infrastructure kinds)
as they were raised, ``timeout`` when the deadline passed, ``agent`` for a harness that crashed. When the
caller goes away (its deadline, Ctrl-C) the harness is cancelled rather than left running."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from palaestra.agents.base import Agent, BackendChat, ToolSurface
from palaestra.client.env_client import HttpEnvClient
from palaestra.core.errors import InfraError, PalaestraError
from palaestra.core.records import Task, Trajectory
from palaestra.core.secrets import redact_url
from palaestra.models.openai_http import OpenAIBackend
from palaestra.server.http import JSON, error_response, from_exception, read_json
from palaestra.server.security import url_host_allowed
from palaestra.wire.env import SessionHandle

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_DEADLINE_S = 24 * 3600.0
_NEEDED = ("task", "session", "env_url", "model_base_url")

__all__ = ["act_endpoint", "refuse_unlisted_urls"]


class _CallerGone(Exception):
    """The client disconnected before the harness finished."""


async def _until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """``await work``, cancelled when the client disconnects (Starlette would let it run on)."""

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    job = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({job, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not job.done():
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)
        raise _CallerGone()
    return job.result()


def _with_steps(harness: Agent, steps: Any, cache: dict[int, Agent]) -> Agent:
    """The served harness with the caller's step limit (a run's ``--max-steps`` holds remotely too)."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1 or not hasattr(harness, "max_steps"):
        return harness
    if steps == getattr(harness, "max_steps", None):
        return harness
    if steps not in cache:
        variant = copy.copy(harness)
        variant.max_steps = steps
        cache[steps] = variant
    return cache[steps]


def refuse_unlisted_urls(urls: dict[str, str], allowed_hosts: tuple[str, ...]) -> Response | None:
    """A 400 naming the first of ``urls`` (request field -> URL) whose host is neither loopback nor in
    ``allowed_hosts``; None when all may be called. Both agent-server routes (``/act`` here, ``/run`` in
    ``rollout/agent_server.py``) check before calling anything, so the server never relays to a host its
    operator did not name (``--call-host``)."""
    for field, url in urls.items():
        if not url_host_allowed(url, allowed_hosts):
            return error_response("bad_request", f"{field} {redact_url(url)[:200]!r} is not on this agent "
                                  "server's allow-list", 400,
                                  "use a loopback address, or start the server with --call-host for that host")
    return None


def act_endpoint(harness: Agent, allowed_hosts: tuple[str, ...] = ()) -> Callable[[Request], Awaitable[Response]]:
    """The ``POST /act`` route handler for ``harness``."""
    variants: dict[int, Agent] = {}

    async def act(request: Request) -> Response:
        try:
            body = await read_json(request, "POST /act")
        except PalaestraError as exc:
            return from_exception(exc, 400)
        if not isinstance(body, dict) or any(k not in body for k in _NEEDED) or not isinstance(body["session"], dict):
            return error_response("bad_request", f"POST /act needs {', '.join(repr(k) for k in _NEEDED)}", 400,
                                  'send {"task": {...}, "session": {"session_id": ...}, "env_url": "...", '
                                  '"model_base_url": "..."}')
        try:
            task = Task.model_validate(body["task"])
            session = SessionHandle.from_dict(body["session"])
            deadline = min(float(body.get("deadline_s") or 600.0), MAX_DEADLINE_S)
            sampling = dict(body.get("sampling") or {})
        except (ValidationError, KeyError, TypeError, ValueError) as exc:
            return error_response("bad_request", f"POST /act: bad request body: {str(exc)[:500]}", 400)
        env_url, base = str(body["env_url"]), str(body["model_base_url"])
        refused = refuse_unlisted_urls({"env_url": env_url, "model_base_url": base}, allowed_hosts)
        if refused is not None:
            return refused
        env_token, key = body.get("env_token"), body.get("model_api_key")
        agent = _with_steps(harness, body.get("max_steps"), variants)
        env = HttpEnvClient(env_url, name=task.env, token=str(env_token) if env_token else None)
        # The caller's proxy retries its own backend: retrying its answer here would multiply the attempts.
        backend = OpenAIBackend(base, api_key=str(key) if key else None, max_retries=0, timeout=deadline)
        try:
            run = agent.run(task, session, ToolSurface(env, session), BackendChat(backend), sampling)
            traj: Trajectory = await _until_disconnect(request, asyncio.wait_for(run, deadline))
        except _CallerGone:
            return Response(status_code=499)
        except asyncio.TimeoutError:
            return error_response("timeout", f"agent '{agent.name}' did not finish within {deadline:g} s", 504)
        except InfraError as exc:
            return JSON({"error": {**exc.to_dict(), "kind": exc.failure}}, status_code=502)
        except PalaestraError as exc:
            return from_exception(exc, 500)
        except Exception as exc:  # a harness bug is the agent's failure, as in a local run
            log.exception("agent '%s' crashed on task %s", agent.name, task.id)
            return error_response("agent", f"{type(exc).__name__}: {exc}"[:2000], 500)
        finally:
            await env.aclose()
            await backend.aclose()
        return JSON({"trajectory": traj.model_dump(mode="json")})

    return act
