"""A harness that runs on an agent server (``palaestra agent serve``): rows route to it with
``agent: remote:URL`` (or ``--agent remote:URL``, or a run-file entry), options ``?token_file=PATH``
(the server's bearer token), ``max_steps=N`` and ``timeout_s=S``.

The run keeps what makes a rollout trustworthy: it opens the session, verifies and closes it, and
records every model call. The agent server only acts (``POST /act``): it gets the session, the
environment's HTTP address and a model base URL, and answers the trajectory. So that it can act:

- the environment must be reachable over HTTP: an environment used by a remote row is mounted as a
  local server process (``placement_for``), whose address and token are sent along;
- the model is this run's own proxy, served for the run on 127.0.0.1 with a fresh token (one face per
  proxy, in the run's event loop, started on first use) under the per-rollout capture path
  ``/rollouts/{rollout_id}/v1``: every call the remote harness makes is recorded in this rollout's
  trajectory, as a local harness's calls are.

Failures keep the kinds a local harness gives: an agent server that is down or refuses the token is
``failed(agent)``; a model failure inside it ``failed(model)``, an environment failure
``failed(environment)`` (the server answers the kind, this client raises the matching error)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote

import orjson

from palaestra.agents.base import ChatModel, ToolSurface
from palaestra.client.transport import NetworkTransport, TransportFailure
from palaestra.core.errors import (
    AgentError,
    ConfigError,
    EnvironmentFailure,
    InfraError,
    ModelError,
    PalaestraError,
    VerifierError,
)
from palaestra.core.records import Task, Trajectory
from palaestra.core.secrets import read_secret_file, redact_url
from palaestra.plugins.spec import Spec, parse_spec
from palaestra.wire.env import SessionHandle

log = logging.getLogger(__name__)

REMOTE_OPTIONS: dict[str, type] = {"token_file": str, "max_steps": int, "timeout_s": float}
# Failure kinds an agent server may answer for one rollout; anything else is the agent's failure.
_FAILURES = ("model", "environment", "sandbox", "agent", "verifier", "judge")
# Placements whose environments have no HTTP address a remote harness could call.
_IN_PROCESS = ("direct", "inprocess")

__all__ = ["REMOTE_OPTIONS", "RemoteAgent", "RunLinks", "is_remote", "link_remote_agents", "placement_for"]


def is_remote(spec: str | None) -> bool:
    """Does this agent spec route rows to an agent server?"""
    if not spec:
        return False
    try:
        return parse_spec(spec, what="agent").kind == "remote"
    except ConfigError:
        return False  # make_agent reports the bad spec


def placement_for(placement: str, remote: bool) -> str:
    """The placement of an environment some remote rows use: a remote harness calls its tools over HTTP,
    so an in-process placement becomes a local server process (any other placement already has one)."""
    return "local" if remote and placement in _IN_PROCESS else placement


def _read_token(path: str) -> str:
    return read_secret_file(path, "the agent server's token file",
                            hint="give the token file `palaestra agent serve` printed (?token_file=PATH)")


class RemoteAgent:
    """The client side of the agent protocol's ``POST /act``. Made from a spec by the agent registry;
    the collector links it to the run (``link``) before the first rollout."""

    def __init__(self, url: str, *, token: str | None = None, max_steps: int = 16,
                 timeout_s: float | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"remote agent URL {redact_url(url)!r} is not an http(s) URL",
                              hint="write remote:http://HOST:PORT (the URL `palaestra agent serve` printed)")
        self.url = url.rstrip("/")
        self.shown = redact_url(self.url)
        self.name = f"remote:{self.shown}"
        self.max_steps = max_steps
        self.timeout_s = timeout_s
        self._token = token
        self._links: RunLinks | None = None
        self._transport: NetworkTransport | None = None

    @classmethod
    def from_spec(cls, spec: Spec, *, max_steps: int = 16) -> RemoteAgent:
        """``remote:URL?token_file=PATH&max_steps=N&timeout_s=S`` (the registry's hook for a target)."""
        if not spec.name:
            raise spec.error("names no agent server", hint="write remote:http://HOST:PORT")
        opts = spec.typed(REMOTE_OPTIONS)
        token = _read_token(opts["token_file"]) if "token_file" in opts else None
        return cls(spec.name, token=token, max_steps=opts.get("max_steps", max_steps), timeout_s=opts.get("timeout_s"))

    def link(self, links: RunLinks) -> None:
        self._links = links

    def _client(self, timeout_s: float) -> NetworkTransport:
        if self._transport is None:
            headers = {"content-type": "application/json"}
            if self._token:
                headers["authorization"] = f"Bearer {self._token}"
            self._transport = NetworkTransport(self.url, timeout=timeout_s, max_connections=1024, headers=headers)
        return self._transport

    async def run(self, task: Task, session: SessionHandle, tools: ToolSurface, model: ChatModel,
                  sampling: dict[str, Any]) -> Trajectory:
        links = self._links
        if links is None:
            raise ConfigError(f"agent '{self.name}' is not linked to a run: it needs the run's environment "
                              "servers and model proxy", hint="remote agents run through `palaestra eval run` "
                              "(not on a Ray cluster yet)")
        rollout_id = getattr(model, "rollout_id", None)
        proxy = getattr(model, "target", None)
        if not rollout_id or proxy is None or not hasattr(proxy, "complete"):
            raise ConfigError(f"agent '{self.name}' needs the rollout's model proxy to expose it to the agent server")
        env_url, env_token = links.env(task.env)
        model_url, model_token = await links.model(proxy)
        body = {"task": task.model_dump(mode="json"), "session": session.to_dict(),
                "env_url": env_url, "env_token": env_token,
                "model_base_url": f"{model_url}/rollouts/{quote(rollout_id, safe='')}/v1",
                "model_api_key": model_token, "sampling": sampling, "max_steps": self.max_steps,
                "deadline_s": links.deadline_s}
        timeout = self.timeout_s or links.deadline_s + 30.0  # the rollout's own deadline normally fires first
        try:
            status, payload = await self._client(timeout).request("POST", "/act", orjson.dumps(body))
        except TransportFailure as exc:
            if exc.kind == "timeout":
                raise AgentError(f"agent server at {self.shown} did not answer within {timeout:g} s",
                                 hint="raise ?timeout_s= or the run's --deadline") from exc
            raise AgentError(f"agent server at {self.shown} is unreachable: {exc.detail}",
                             hint="start it with `palaestra agent serve NAME --port PORT`, or fix the URL in "
                                  "remote:URL") from exc
        return self._answer(status, payload)

    def _answer(self, status: int, payload: bytes) -> Trajectory:
        try:
            data = orjson.loads(payload) if payload else None
        except orjson.JSONDecodeError:
            data = None
        if status == 200 and isinstance(data, dict) and isinstance(data.get("trajectory"), dict):
            try:
                return Trajectory.model_validate(data["trajectory"])
            except ValueError as exc:
                raise AgentError(f"agent server at {self.shown} answered a trajectory that does not validate: "
                                 f"{str(exc)[:300]}") from None
        err = data.get("error") if isinstance(data, dict) else None
        if not isinstance(err, dict):
            raise AgentError(f"agent server at {self.shown} answered HTTP {status} without an agent-protocol body: "
                             f"{payload[:200]!r}", hint="is this URL a `palaestra agent serve` server?")
        raise _error_from(err, status, self.shown)

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()
            self._transport = None


def _error_from(err: dict[str, Any], status: int, where: str) -> BaseException:
    """An agent server's error envelope as the error a local harness would have raised."""
    kind = str(err.get("kind") or "agent")
    message = str(err.get("message") or f"HTTP {status}")
    hint = err.get("hint") if isinstance(err.get("hint"), str) else None
    if status == 401:
        return AgentError(f"agent server at {where} refused the request: {message}",
                          hint="give its token: remote:URL?token_file=PATH (the file `palaestra agent serve` "
                               "printed)")
    if kind == "model":
        return ModelError(message, hint=hint)
    if kind == "environment":
        return EnvironmentFailure(message, hint=hint)
    if kind == "verifier":
        return VerifierError(message, hint=hint)
    if kind in _FAILURES:
        return InfraError(kind, message, hint=hint)  # type: ignore[arg-type]
    if kind == "timeout":
        return asyncio.TimeoutError(message)  # the runner reports it as timed_out, as a local one
    if status == 400:  # the request itself was refused (a URL not on its allow-list): retrying cannot help
        return ConfigError(f"agent server at {where} refused the request: {message}", hint=hint)
    if status >= 500 and kind in ("internal", "error"):
        return AgentError(f"agent server at {where} failed: {message}", hint=hint)
    return PalaestraError(message, kind=kind, hint=hint)


# ---- what a run exposes to its remote agents --------------------------------------------------------------
class _Exposed(Protocol):
    """A mounted environment as a remote harness needs it (``MountedEnv`` has both)."""

    base_url: str | None
    token: str | None


class _ModelFace:
    """One model proxy served over HTTP on 127.0.0.1 in this event loop, behind its own token."""

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy
        self.url = ""
        self.token = ""
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        import uvicorn

        from palaestra.agents.external.endpoint import _QuietServer
        from palaestra.server.model_app import create_model_app
        from palaestra.server.security import GuardPolicy, new_token, secure

        self.token = new_token()
        app = secure(create_model_app(self.proxy), GuardPolicy.for_bind("127.0.0.1", token=self.token))
        self._server = _QuietServer(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                                   lifespan="off", access_log=False, timeout_graceful_shutdown=1))
        self._task = asyncio.create_task(self._server.serve())
        for _ in range(1000):
            if self._server.started:
                port = int(self._server.servers[0].sockets[0].getsockname()[1])
                self.url = f"http://127.0.0.1:{port}"
                return
            if self._task.done():
                break
            await asyncio.sleep(0.01)
        await self.stop()
        raise AgentError("the run's model proxy could not be served on 127.0.0.1 for a remote agent",
                         hint="check that this machine allows listening on a loopback port")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 5.0)
        self._server = self._task = None


class RunLinks:
    """A run's environments and models as its remote agents reach them: each environment's address and
    token, and an HTTP face per model proxy (started on first use; stopped by ``aclose``)."""

    def __init__(self, envs: Mapping[str, _Exposed], *, deadline_s: float,
                 agents: list[RemoteAgent] | None = None) -> None:
        self.envs = envs
        self.deadline_s = deadline_s
        self._faces: dict[int, _ModelFace] = {}
        self._lock = asyncio.Lock()
        self._agents = list(agents or [])
        for agent in self._agents:
            agent.link(self)

    def env(self, name: str) -> tuple[str, str | None]:
        mounted = self.envs.get(name)
        if mounted is None or not mounted.base_url:
            raise ConfigError(f"environment '{name}' has no HTTP address a remote agent could call",
                              hint="run it with --placement local")
        return mounted.base_url, mounted.token

    async def model(self, proxy: Any) -> tuple[str, str]:
        async with self._lock:
            face = self._faces.get(id(proxy))
            if face is None:
                face = _ModelFace(proxy)
                await face.start()
                self._faces[id(proxy)] = face
        return face.url, face.token

    async def aclose(self) -> None:
        for agent in self._agents:
            await agent.aclose()
        for face in self._faces.values():
            await face.stop()
        self._faces.clear()


def link_remote_agents(agents: Mapping[str, Any], envs: Mapping[str, _Exposed], *,
                       deadline_s: float) -> RunLinks | None:
    """Link every remote agent of a run to its environments and models; None when there is none."""
    remote = [a for a in agents.values() if isinstance(a, RemoteAgent)]
    if not remote:
        return None
    return RunLinks(envs, deadline_s=deadline_s, agents=remote)
