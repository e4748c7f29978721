"""An agent as a server: ``POST /run`` takes a task plus where its environment and model live, runs
the whole rollout (session, agent loop, verify) and answers the rollout record. ``POST /act``
(``agents/act.py``) runs only the harness, on a session the caller opened and will verify: what a run's
``remote:URL`` agent calls.

It calls only loopback addresses and the hosts it was given (``allowed_hosts``): a request naming any
other ``env_url`` or ``model_base_url`` is a 400, so the server is no relay to arbitrary addresses.
``env_token`` and ``model_api_key`` in the body are the bearer tokens of those two servers (a local
environment server asks for one); they are used for the calls and never stored or answered back.

It lives in ``rollout/``, not ``agents/``, because it runs the rollout runner: agents sit below the
runner in the layers (docs/architecture.md), so the server that composes both sits beside the runner."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from palaestra.agents.act import act_endpoint, refuse_unlisted_urls
from palaestra.agents.base import Agent
from palaestra.agents.tool_agent import ToolAgent
from palaestra.client.env_client import EnvClient
from palaestra.core.errors import PalaestraError
from palaestra.core.records import Task
from palaestra.models.openai_http import OpenAIBackend
from palaestra.rollout.runner import run_rollout
from palaestra.server.http import JSON, error_response, from_exception, read_json
from palaestra.server.model_proxy import ModelProxy


def create_agent_app(agent: Agent | None = None, *, allowed_hosts: tuple[str, ...] = ()) -> Starlette:
    harness: Agent = agent or ToolAgent()
    backends: dict[tuple[str, str | None], OpenAIBackend] = {}

    async def run(request: Request) -> Response:
        try:
            body = await read_json(request, "POST /run")
            if not isinstance(body, dict) or "task" not in body or "env_url" not in body \
                    or "model_base_url" not in body:
                return error_response("bad_request", "POST /run needs 'task', 'env_url' and 'model_base_url'",
                                      400, 'send {"task": {...}, "env_url": "...", "model_base_url": "..."}')
            task = Task.model_validate(body["task"])
            base, env_url = str(body["model_base_url"]), str(body["env_url"])
            refused = refuse_unlisted_urls({"env_url": env_url, "model_base_url": base}, allowed_hosts)
            if refused is not None:
                return refused
            key = body.get("model_api_key")
            key = str(key) if key else None
            backend = backends.get((base, key))
            if backend is None:
                backend = backends[(base, key)] = OpenAIBackend(base, model=body.get("model_name"), api_key=key)
            env_token = body.get("env_token")
            env = EnvClient.http(env_url, name=task.env, token=str(env_token) if env_token else None)
            try:
                rollout = await run_rollout(
                    task, env=env, agent=harness, proxy=ModelProxy(backend),
                    model_name=str(body.get("model_name") or base),
                    repeat=int(body.get("repeat", 0)), attempt=int(body.get("attempt", 0)),
                    deadline_s=float(body.get("deadline_s", 600.0)), sampling=dict(body.get("sampling") or {}),
                )
            finally:
                await env.aclose()
            return JSON(rollout.model_dump(mode="json"))
        except PalaestraError as exc:
            return from_exception(exc, 400)

    async def healthz(request: Request) -> Response:
        return JSON({"status": "ok", "agent": harness.name})

    async def info(request: Request) -> Any:
        return JSON({"name": harness.name})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for backend in backends.values():
                await backend.aclose()

    return Starlette(lifespan=lifespan, routes=[
        Route("/run", run, methods=["POST"]),
        Route("/act", act_endpoint(harness, allowed_hosts), methods=["POST"]),  # for RemoteAgent (agents/act.py)
        Route("/healthz", healthz, methods=["GET"]),
        Route("/info", info, methods=["GET"]),
    ])
