"""A rollout worker: a Ray actor that runs single attempts with its own model backends, agents and
environment clients, and hands each finished ``Rollout`` back to the driver, which journals it.

A worker never journals and never retries: the driver owns both, so a worker that dies mid-rollout loses
nothing but its in-flight attempts, which the driver records as failed and runs again elsewhere."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from palaestra.agents.base import Agent
from palaestra.client.env_client import EnvClient
from palaestra.core.records import Rollout, Task
from palaestra.placement import MountedEnv
from palaestra.rollout.config import RunConfig
from palaestra.rollout.models import ModelPool


class RolloutWorker:
    """Set up lazily (on the first ``ping`` or ``run``), so a restarted actor rebuilds itself too."""

    def __init__(self, cfg: dict[str, Any], envs: dict[str, str], model_specs: list[str],
                 replicas: dict[str, list[str]] | None = None, index: int = 0) -> None:
        self.cfg = RunConfig.model_validate(cfg)
        self.env_specs = envs  # env name -> importable spec, as the driver resolved it
        self.model_specs = model_specs
        self.replicas = replicas  # env name -> names of its replica actors (with --placement ray)
        self.index = index
        self.envs: dict[str, EnvClient] = {}
        self.mounted: list[MountedEnv] = []
        self.models = ModelPool(self.cfg)
        self.agents: dict[str, Agent] = {}
        self._ready: asyncio.Task[None] | None = None

    async def _setup(self) -> None:
        from palaestra.envs.registry import register_alias
        from palaestra.placement import mount_env
        from palaestra.rollout.config import env_options

        for name, spec in self.env_specs.items():
            register_alias(name, spec)
        for name, spec in sorted(self.env_specs.items()):
            if self.replicas is not None:
                import ray

                from palaestra.placement.ray import RayTransport

                handles = [ray.get_actor(n) for n in self.replicas[name]]
                self.envs[name] = EnvClient(RayTransport(name, handles, offset=self.index), name=name)
            else:
                mounted = await mount_env(spec, self.cfg.placement, env_options(self.cfg))
                self.mounted.append(mounted)
                self.envs[name] = mounted.client
        self.models.prepare(set(self.model_specs))

    async def _ensure(self) -> None:
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._setup())
        await self._ready

    def _agent(self, name: str) -> Agent:
        if name not in self.agents:
            from palaestra.agents.registry import make_agent

            self.agents[name] = make_agent(name, max_steps=self.cfg.max_steps)
        return self.agents[name]

    async def ping(self) -> dict[str, Any]:
        """Ready check (also sets up): where this worker runs, for placement reports and fault tests."""
        await self._ensure()
        import ray

        return {"pid": os.getpid(), "host": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id(),
                "index": self.index}

    def _sampling(self, repeat: int) -> dict[str, Any]:
        c = self.cfg
        s: dict[str, Any] = {}
        if c.temperature is not None:
            s["temperature"] = c.temperature
        if c.max_tokens is not None:
            s["max_tokens"] = c.max_tokens
        if c.seed is not None:
            s["seed"] = c.seed + repeat
        if c.tool_choice is not None:  # the runner applies it to the requests that offer tools
            s["tool_choice"] = c.tool_choice
        if c.model_name:
            s["model"] = c.model_name
        return s

    async def run(self, task: dict[str, Any], repeat: int, attempt: int) -> bytes:
        """One attempt; the ``Rollout`` comes back as JSON (small, and independent of pickling details).

        Mirrors one iteration of ``Collector._one`` (cascade routes included); keep the two in step."""
        from palaestra.core.secrets import redact_url
        from palaestra.rollout.cascade import run_cascade
        from palaestra.rollout.models import needs_reference
        from palaestra.rollout.runner import run_rollout

        await self._ensure()
        t = Task.model_validate(task)
        spec = t.model or self.cfg.model
        route = self.models.route(spec)
        kw: dict[str, Any] = {"env": self.envs[t.env], "agent": self._agent(t.agent or self.cfg.agent),
                              "repeat": repeat, "attempt": attempt, "deadline_s": self.cfg.deadline_s,
                              "sampling": self._sampling(repeat)}
        rollout: Rollout
        if route is not None and route.strategy == "cascade":
            rollout = await run_cascade(t, route, spec, self.models, **kw)
        else:
            rollout = await run_rollout(t, proxy=self.models.proxy(spec), model_name=redact_url(spec),
                                        with_reference=needs_reference(self.models.resolve(spec)), **kw)
        return rollout.model_dump_json().encode()

    async def shutdown(self) -> None:
        for mounted in self.mounted:
            await mounted.stop()
        await self.models.aclose()
