"""NeMo Gym's own agent server as a Palaestra harness (``--agent nemo-gym``).

Some NeMo Gym rows carry no prompt (``responses_create_params.input`` is empty): their agent builds it
(``scicode_agent`` from the row's sub-steps, one model call per sub-step, then ``/verify`` with the
accumulated code). Palaestra's agents send a row's input, so such rows need NeMo Gym's agent itself.
This harness runs it: for a ``nemo_gym:<server>`` row it starts, once per config, NeMo Gym's agent
server and the resources server it names, wired as ``gym env start`` wires them
(``nemo_gym_agent_launch``), with the agent's model server being this run's model, and posts the row to
the agent's ``POST /run``, NeMo Gym's rollout entry point. The agent seeds the resources server, calls
the model, calls tools, and calls ``/verify`` itself; ``/run`` answers the verify response.

- Model calls: every call the agent makes goes to a model endpoint served here, on 127.0.0.1, routed by
  NeMo Gym's rollout prefix (``/ng-rollout/<id>/v1/responses``, the run body's ``_ng_rollout_id``) to
  the rollout's model (``BackendChat`` of the run's proxy): each one is recorded in the rollout's
  trajectory, and the run's sampling settings apply to it, as for any harness.
- The verdict: the verify response ``/run`` answered is kept in the trajectory (``nemo_gym_run``);
  the ``nemo_gym:<server>`` environment's verify reads the reward from it (it does not verify twice: a
  second ``/verify`` would re-run the grading, e.g. SciCode's tests).
- Failures are typed: a model error is ``failed(model)``; a ``/run`` that answers an error (the
  resources server's verify failing, a server that does not start) ``failed(environment)`` with the
  servers' log tails.

Rows are routed here automatically: a ``nemo_gym:`` row with an empty input whose NeMo Gym agent builds
the prompt (``nemo_gym_families.row_agent``) names ``nemo-gym`` as its agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from pathlib import Path
from typing import Any

import httpx
import orjson

from palaestra.adapters import nemo_gym_agent_launch as launch
from palaestra.adapters import nemo_gym_rows as nemo_rows
from palaestra.adapters.nemo_gym_launch import config_path, names_model_server, prompt_agent
from palaestra.adapters.nemo_gym_server import AGENT_RUN_KEY as RUN_KEY
from palaestra.adapters.nemo_gym_server import nemo_row
from palaestra.agents.base import ChatModel, ToolSurface
from palaestra.agents.external.endpoint import ChatModelBackend, InTaskServer, LocalProxy
from palaestra.agents.external.transcript import rebuild_messages
from palaestra.core.errors import AgentError, ConfigError, EnvironmentFailure, ModelError
from palaestra.core.records import Task, Trajectory
from palaestra.models.base import CallContext
from palaestra.wire.env import SessionHandle

NAME = "nemo-gym"
RAY_START_TIMEOUT = "timed out during startup"  # what Ray says when its node did not start in its fixed wait
_PREFIX = b"/ng-rollout/"  # NeMo Gym's rollout prefix of a model call (``rollout_path_prefix``)


class _Dispatch:
    """The endpoint's backend: a call goes to the ChatModel of the rollout its path names."""

    name = "nemo-gym-agent"

    def __init__(self) -> None:
        self.routes: dict[str, ChatModelBackend] = {}

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        backend = self.routes.get(ctx.rollout_id or "")
        if backend is None:
            raise ModelError(
                f"no rollout '{ctx.rollout_id}' is running through this endpoint",
                status=404,
                hint="NeMo Gym's agent must prefix its model calls with /ng-rollout/<id>",
            )
        return await backend.chat(request, ctx)

    async def aclose(self) -> None:
        return None


def _rollout_prefix(app: Any) -> Any:
    """ASGI: ``/ng-rollout/<id>/...`` (NeMo Gym) → ``/rollouts/<id>/...`` (the model app's own prefix)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("path", "").startswith("/ng-rollout/"):
            path = "/rollouts/" + scope["path"].removeprefix("/ng-rollout/")
            raw = scope.get("raw_path") or b""
            scope = {
                **scope,
                "path": path,
                "raw_path": b"/rollouts/" + raw[len(_PREFIX) :] if raw.startswith(_PREFIX) else raw,
            }
        await app(scope, receive, send)

    return wrapped


def _judge_url(stack: contextlib.ExitStack) -> str:
    """A model server for the resources server's own model calls (a judge): ``DEFAULT_JUDGE``, served on
    127.0.0.1 in a thread of its own for as long as the harness lives."""
    from palaestra.adapters.nemo_gym_server import DEFAULT_JUDGE
    from palaestra.models.factory import make_backend
    from palaestra.server.loopback import serve_app
    from palaestra.server.model_app import create_model_app
    from palaestra.server.model_proxy import ModelProxy

    return stack.enter_context(serve_app(create_model_app(ModelProxy(make_backend(DEFAULT_JUDGE)))))


class NemoGymAgent:
    """Runs a NeMo Gym row through NeMo Gym's own agent server (see the module docstring)."""

    name = NAME

    def __init__(
        self,
        agent_type: str | None = None,
        *,
        venv: Path | None = None,
        timeout_s: float = 1800.0,
        start_timeout_s: float = 240.0,
        configs: tuple[str, ...] = (),
    ) -> None:
        self.agent_type = agent_type  # the NeMo Gym agent type; None: the one the row's config names
        self.configs = configs  # NeMo Gym config files merged after the server's own (``config=A.yaml,B.yaml``)
        self.venv = venv
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self._dispatch = _Dispatch()
        self._proxy = LocalProxy(self._dispatch)
        self._server = InTaskServer()
        self._model_url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._stacks: dict[tuple[str, str | None], launch.AgentStack] = {}
        self._start_errors: dict[tuple[str, str | None], str] = {}  # why a stack did not start
        self._judges = contextlib.ExitStack()
        self._judge: str | None = None
        self._labels = itertools.count()

    @classmethod
    def from_spec(cls, spec: Any, *, max_steps: int = 16) -> NemoGymAgent:
        """``nemo-gym`` (the agent each row's config names) or ``nemo-gym:<agent_type>``; ``?timeout_s=``
        bounds one ``/run``; ``?config=A.yaml,B.yaml`` merges NeMo Gym config files after the server's own."""
        opts = spec.typed({"timeout_s": float, "max_steps": int, "config": str})
        configs = tuple(c for c in str(opts.get("config", "")).split(",") if c)
        return cls(spec.name or None, timeout_s=opts.get("timeout_s", 1800.0), configs=configs)

    # ---- the processes ---------------------------------------------------------------------------
    async def _ensure_endpoint(self) -> str:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (a new run in this process): everything anew
            await asyncio.to_thread(self._close_stacks)
            self._loop, self._lock, self._model_url = loop, asyncio.Lock(), None
        assert self._lock is not None
        async with self._lock:
            if self._model_url is None:
                import uvicorn

                app = _rollout_prefix(self._app())
                config = uvicorn.Config(
                    app,
                    host="127.0.0.1",
                    port=0,
                    log_level="warning",
                    lifespan="off",
                    access_log=False,
                    timeout_graceful_shutdown=1,
                )
                server = await self._server.start(config, rounds=1000)
                if server is None:
                    raise AgentError("the model endpoint for NeMo Gym's agent did not start on 127.0.0.1")
                port = server.servers[0].sockets[0].getsockname()[1]
                self._model_url = f"http://127.0.0.1:{port}"
        return self._model_url

    def _app(self) -> Any:
        from palaestra.server.model_app import create_model_app

        return create_model_app(self._proxy)

    async def _stack(self, server: str, agent_ref: str | None) -> launch.AgentStack:
        model_url = await self._ensure_endpoint()
        assert self._lock is not None
        async with self._lock:
            key = (server, agent_ref)
            if key in self._start_errors:  # it could not start: the same import or config fails again
                raise EnvironmentFailure(self._start_errors[key])
            stack = self._stacks.get(key)
            if stack is not None and stack.alive():
                return stack
            if stack is not None:
                await asyncio.to_thread(stack.close)
            path = config_path(server, self.venv, agent_ref)
            if path is None:
                raise ConfigError(f"NeMo Gym server '{server}' ships no config that defines it")
            if self._judge is None and names_model_server(server, self.venv, agent_ref):
                self._judge = await asyncio.to_thread(_judge_url, self._judges)
            agent_type = self.agent_type or prompt_agent(server, self.venv, agent_ref)
            try:
                wiring = await asyncio.to_thread(
                    launch.wiring,
                    path,
                    self.venv,
                    policy_url=model_url,
                    judge_url=self._judge,
                    agent=agent_ref,
                    agent_type=agent_type,
                    extra_configs=self.configs,
                )
            except EnvironmentFailure as exc:
                self._start_errors[key] = exc.message
                raise
            try:
                started = await asyncio.to_thread(self._start, wiring)
            except EnvironmentFailure as exc:
                self._start_errors[key] = exc.message
                raise
            self._stacks[key] = started
            return started

    def _start(self, wiring: launch.Wiring) -> launch.AgentStack:
        try:
            return launch.AgentStack(wiring, self.venv, self.start_timeout_s)
        except EnvironmentFailure as exc:  # a machine too loaded for Ray's fixed start-up wait: once more
            if RAY_START_TIMEOUT not in exc.message:
                raise
        return launch.AgentStack(wiring, self.venv, self.start_timeout_s)

    def _close_stacks(self) -> None:
        stacks, self._stacks = list(self._stacks.values()), {}
        for stack in stacks:
            stack.close()

    def close(self) -> None:
        """Stop NeMo Gym's servers and the judge (the model endpoint ends with its event loop)."""
        self._close_stacks()
        self._judges.close()
        self._judge = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # ---- one rollout -----------------------------------------------------------------------------
    async def run(
        self, task: Task, session: SessionHandle, tools: ToolSurface, model: ChatModel, sampling: dict[str, Any]
    ) -> Trajectory:
        if not task.env.startswith("nemo_gym:"):
            raise ConfigError(
                f"the nemo-gym agent runs NeMo Gym rows on NeMo Gym's servers, not env '{task.env}'",
                hint="run the row with --env nemo_gym:<server>",
            )
        server = task.env.removeprefix("nemo_gym:")
        ref = task.metadata.get(nemo_rows.AGENT_REF_KEY)
        ref_name = ref.get("name") if isinstance(ref, dict) else ref if isinstance(ref, str) else None
        stack = await self._stack(server, ref_name)
        rid = getattr(model, "rollout_id", None)
        label = "".join(c if c.isalnum() or c in "._-" else "-" for c in (rid or f"r{next(self._labels)}"))
        backend = ChatModelBackend(model, sampling)
        self._dispatch.routes[label] = backend
        self._proxy.register(label)
        body = nemo_row(task) | {"_ng_rollout_id": label}
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, trust_env=False) as client:
                response = await client.post(
                    stack.agent_url + "/run", content=orjson.dumps(body), headers={"content-type": "application/json"}
                )
        except httpx.HTTPError as exc:
            raise EnvironmentFailure(
                f"NeMo Gym agent '{stack.wiring.agent}' did not answer /run: {exc!r}; {stack.log_tail()}"
            ) from exc
        finally:
            self._dispatch.routes.pop(label, None)
            calls = self._proxy.pop_calls(label)
            self._proxy.unregister(label)  # the endpoint keeps nothing per rollout once it is done
        if response.status_code >= 400:
            if backend.errors:  # the model failed, and the agent passed the failure on
                raise backend.errors[-1]
            raise EnvironmentFailure(
                f"NeMo Gym agent '{stack.wiring.agent}' answered /run with HTTP "
                f"{response.status_code}: {response.text[:500]}; the servers logged: "
                f"{stack.log_tail()}"
            )
        result = response.json()
        if not isinstance(result, dict) or not isinstance(result.get("reward"), (int, float)):
            raise EnvironmentFailure(f"NeMo Gym agent '{stack.wiring.agent}' answered /run without a reward")
        messages, final = rebuild_messages(calls)
        kept = {k: v for k, v in result.items() if k not in body or k in ("reward", "response")}
        return Trajectory.model_validate(
            {
                "messages": messages or list(session.messages),
                "tool_calls": tools.records,
                "final_answer": final,
                "steps": len(calls),
                "stop_reason": "nemo_gym_run",
                RUN_KEY: kept,
                "harness": {**launch.describe(stack.wiring), "model_calls": len(calls)},
            }
        )
