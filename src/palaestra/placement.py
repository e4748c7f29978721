"""Where an environment runs: in-process (ASGI app called directly, no socket), ``direct`` (the host
object itself, for the lowest overhead), or a local process (uvicorn on 127.0.0.1, started and stopped
here). Callers get an ``EnvClient`` and never know which."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from palaestra.client.env_client import EnvClient, HttpEnvClient
from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError, EnvironmentFailure, InfraError, PalaestraError, UnknownSession
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.envproc import SupervisedEnvClient
from palaestra.envs.registry import load_env, load_env_class, spec_for
from palaestra.server.sessions import EnvironmentHost
from palaestra.wire.env import SessionHandle, ToolResult

Placement = Literal["inprocess", "direct", "local"]
PLACEMENTS: tuple[str, ...] = ("inprocess", "direct", "local")


class DirectEnvClient:
    """Calls an in-process ``EnvironmentHost`` without HTTP: the same session logic, no serialization."""

    def __init__(self, host: EnvironmentHost) -> None:
        self.host = host
        self.name = host.env.name

    async def info(self) -> dict[str, Any]:
        return self.host.env.info()

    async def open(self, task: Task) -> SessionHandle:
        return SessionHandle.from_dict(await self.host.open(task))

    async def call_tool(self, session_id: str, name: str, arguments: Any) -> ToolResult:
        if isinstance(arguments, str):
            try:
                arguments = orjson.loads(arguments) if arguments.strip() else {}
            except orjson.JSONDecodeError as exc:
                return ToolResult(error={"kind": "bad_arguments",
                                         "message": f"arguments for tool '{name}' are not valid JSON ({exc})"})
        try:
            return await self.host.call_tool(session_id, name, arguments)
        except UnknownSession as exc:
            raise EnvironmentFailure(exc.message, hint=exc.hint) from exc
        except InfraError:
            raise
        except PalaestraError as exc:
            return ToolResult(error=exc.to_dict())

    async def verify(self, session_id: str, trajectory: Trajectory) -> Verdict:
        return await self.host.verify(session_id, trajectory)

    async def verify_stateless(self, task: Task, trajectory: Trajectory) -> Verdict:
        return await self.host.verify_stateless(task, trajectory)

    async def reference(self, task: Task) -> Reference | None:
        return self.host.env.reference(task)

    async def close(self, session_id: str) -> None:
        await self.host.close(session_id)

    async def aclose(self) -> None:
        await self.host.close_all()


@dataclass
class MountedEnv:
    """A running environment and the means to stop it."""

    name: str
    spec: str
    placement: str
    client: EnvClient
    env_class: type[Environment]
    process: subprocess.Popen[bytes] | None = None
    base_url: str | None = None
    startup_s: float = 0.0
    supervisor: SupervisedEnvClient | None = None
    token: str | None = None  # the bearer token of a local server (``client`` already sends it)

    def __post_init__(self) -> None:
        if self.supervisor is not None:
            self.process = self.supervisor.process
            self.token = self.supervisor.token

    async def stop(self) -> None:
        await self.client.aclose()  # a supervised client also stops its process
        self.process = None


async def mount_env(spec: str | Environment, placement: str = "inprocess") -> MountedEnv:
    """Mount an environment in the given placement and return a client for it."""
    t0 = time.perf_counter()
    if placement == "ray":  # valid, but only where there is a cluster to place the servers on
        raise ConfigError("--placement ray runs environment servers as Ray actors, so it needs a cluster",
                          hint="add --cluster ray:local (a Ray cluster on this machine) or --cluster ray:HOST:PORT, "
                               "or use --placement local for a server process on this machine")
    if placement not in PLACEMENTS:
        raise ConfigError(f"unknown placement '{placement}'", hint=f"use one of {', '.join(PLACEMENTS)}, or ray "
                                                                  "with --cluster")
    env = spec if isinstance(spec, Environment) else None
    spec_str = spec if isinstance(spec, str) else f"{type(spec).__module__}:{type(spec).__qualname__}"
    if placement == "local":
        if env is not None:
            raise ConfigError("a local-process placement needs an importable spec, not an instance")
        cls = load_env_class(spec_str)
        supervised = SupervisedEnvClient(spec_for(spec_str), cls.name)
        await supervised.start()
        return MountedEnv(cls.name, spec_str, placement, supervised, cls, None, supervised.base_url,
                          time.perf_counter() - t0, supervisor=supervised)
    env = env or load_env(spec_str)
    host = EnvironmentHost(env)
    client: EnvClient
    if placement == "direct":
        client = DirectEnvClient(host)
    else:
        from palaestra.server.env_app import create_env_app  # Starlette: only for the in-process placement

        app = create_env_app(host)
        client = HttpEnvClient(name=env.name, app=app)
    return MountedEnv(env.name, spec_str, placement, client, type(env), None, None, time.perf_counter() - t0)
