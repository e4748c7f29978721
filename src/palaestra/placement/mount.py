"""Mounting an environment: in-process (its ASGI app called directly, no socket), ``direct`` (the host
object itself, for the lowest overhead), or a local process (uvicorn on 127.0.0.1, supervised). Ray
replicas are mounted by the cluster fleet (``placement/ray.py``). Callers get one ``EnvClient`` and never
know which transport carries it."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from typing import Any, Literal

from palaestra.client.env_client import EnvClient, HttpTransport
from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError
from palaestra.envs.registry import load_env, load_env_class, spec_for
from palaestra.placement.host import HostTransport
from palaestra.placement.process import SupervisedTransport
from palaestra.server.sessions import EnvironmentHost

Placement = Literal["inprocess", "direct", "local"]
PLACEMENTS: tuple[str, ...] = ("inprocess", "direct", "local")


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
    supervisor: SupervisedTransport | None = None
    token: str | None = None  # the bearer token of a local server (``client`` already sends it)

    def __post_init__(self) -> None:
        if self.supervisor is not None:
            self.process = self.supervisor.process
            self.token = self.supervisor.token

    async def stop(self) -> None:
        await self.client.aclose()  # a supervised transport also stops its process
        self.process = None


async def mount_env(spec: str | Environment, placement: str = "inprocess",
                    options: dict[str, Any] | None = None, *, max_sessions: int | None = None) -> MountedEnv:
    """Mount an environment in the given placement and return a client for it. ``options``: the run's
    environment options (``rollout.config.env_options``: sandbox, scoring, judge, run id); the
    environment's constructor takes those it names, in this process or in the server process.
    ``max_sessions``: the session store's cap (None: the environment's own, ``Environment.max_sessions``)."""
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
        supervised = SupervisedTransport(spec_for(spec_str), cls.name, options=options, max_sessions=max_sessions)
        await supervised.start()
        return MountedEnv(cls.name, spec_str, placement, EnvClient(supervised, name=cls.name), cls, None,
                          supervised.base_url,
                          time.perf_counter() - t0, supervisor=supervised)
    env = env or load_env(spec_str, options)
    host = EnvironmentHost(env, max_sessions=max_sessions)
    if placement == "direct":
        client = EnvClient(HostTransport(host), name=env.name)
    else:
        from palaestra.server.env_app import create_env_app  # Starlette: only for the in-process placement

        client = EnvClient(HttpTransport(app=create_env_app(host)), name=env.name)
    return MountedEnv(env.name, spec_str, placement, client, type(env), None, None, time.perf_counter() - t0)
