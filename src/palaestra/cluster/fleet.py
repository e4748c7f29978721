"""The run's actors on the cluster: environment replica sets and rollout workers, placed with Ray's SPREAD
strategy so they land on different nodes, checked when a call on them fails, and stopped at the end.

A worker whose call failed with an actor error is held back until a ping says whether Ray restarted it
(it rejoins) or it is gone for good (it is dropped); the run only fails when no worker is left."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from palaestra.cluster.runtime import ClusterError, Connection
from palaestra.cluster.spec import ClusterSpec
from palaestra.core.errors import PalaestraError
from palaestra.rollout.config import RunConfig, env_options

WORKER_RESTARTS = 4  # per worker: a node lost now and then is survivable, a crash loop is not
REPLICA_RESTARTS = 16
PING_TIMEOUT_S = 120.0  # a restarted actor on a loaded node may take a while to import and set up


@dataclass
class WorkerSlot:
    index: int
    actor: Any
    in_flight: int = 0
    healthy: bool = True
    info: dict[str, Any] = field(default_factory=dict)


class Fleet:
    """Owns every actor of one run, so that nothing of the run outlives it on a shared cluster."""

    def __init__(self, conn: Connection, spec: ClusterSpec, cfg: RunConfig, envs: dict[str, str],
                 model_specs: list[str]) -> None:
        self.conn = conn
        self.spec = spec
        self.cfg = cfg
        self.envs = envs
        self.model_specs = model_specs
        self.replicas: dict[str, list[Any]] = {}
        # workers look replicas up by name: handles as constructor arguments would sit in the object store,
        # and a worker restarted after its node died could not get them back
        self.replica_names: dict[str, list[str]] = {}
        self.workers: list[WorkerSlot] = []
        self.replica_nodes: set[str | None] = set()
        self.replica_cpus = spec.env_cpus
        self._changed = asyncio.Condition()
        self._checks: set[asyncio.Task[None]] = set()

    @property
    def uses_replicas(self) -> bool:
        return self.cfg.placement == "ray"

    def worker_count(self) -> int:
        if self.spec.workers:
            return self.spec.workers
        cpus = self.conn.resources().get("CPU", 1.0)
        if self.uses_replicas:
            cpus -= self.spec.env_cpus * self.spec.env_replicas * len(self.envs)
        per = self.spec.worker_cpus
        n = int(cpus // per) if per > 0 else self.conn.alive_nodes()
        return max(1, min(64, n, self.cfg.concurrency))

    def check_fits(self, workers: int) -> None:
        """Refuse at once what could never be placed, instead of waiting out the start timeout. Replicas
        reserve a sliver of CPU only so that Ray spreads them; where the sliver is what does not fit, they
        reserve none (and spread as Ray sees fit)."""
        total = self.conn.resources().get("CPU", 0.0)
        need = workers * self.spec.worker_cpus
        replicas = self.spec.env_replicas * len(self.envs) if self.uses_replicas else 0
        if need + self.replica_cpus * replicas > total + 1e-9 and need <= total + 1e-9 and self.replica_cpus < 0.5:
            self.replica_cpus = 0.0
        need += self.replica_cpus * replicas
        if need > total + 1e-9:
            raise ClusterError(
                f"{workers} rollout workers at {self.spec.worker_cpus:g} CPU"
                + (f" and {replicas} environment replicas at {self.replica_cpus:g} CPU" if replicas else "")
                + f" need {need:g} CPUs; the cluster has {total:g}",
                hint="lower ?workers= or ?worker_cpus= in --cluster (or ?cpus= for ray:local), or add nodes")

    async def start(self) -> None:
        ray = self.conn.ray
        from palaestra.cluster.worker import RolloutWorker
        from palaestra.placement.ray import EnvReplica

        count = self.worker_count()
        self.check_fits(count)
        pings: list[Any] = []
        if self.uses_replicas:
            replica_cls = ray.remote(EnvReplica)
            tag = uuid.uuid4().hex[:8]
            for name, spec in sorted(self.envs.items()):
                names = [f"palaestra-{tag}-{name}-{i}" for i in range(self.spec.env_replicas)]
                self.replicas[name] = [replica_cls.options(
                    name=n, num_cpus=self.replica_cpus, max_restarts=REPLICA_RESTARTS,
                    scheduling_strategy="SPREAD", max_concurrency=4096).remote(spec, self.envs, env_options(self.cfg))
                    for n in names]
                self.replica_names[name] = names
                pings += [r.ping.remote() for r in self.replicas[name]]
        worker_cls = ray.remote(RolloutWorker)
        cfg = self.cfg.model_dump(mode="json")
        for i in range(count):
            actor = worker_cls.options(num_cpus=self.spec.worker_cpus, max_restarts=WORKER_RESTARTS,
                                       max_task_retries=0, scheduling_strategy="SPREAD",
                                       max_concurrency=self.cfg.concurrency + 16).remote(
                cfg, self.envs, self.model_specs, self.replica_names if self.uses_replicas else None, i)
            self.workers.append(WorkerSlot(i, actor))
        pings += [w.actor.ping.remote() for w in self.workers]
        try:
            answers = await asyncio.wait_for(asyncio.gather(*pings), self.spec.start_timeout_s)
        except asyncio.TimeoutError:
            raise ClusterError(
                f"{len(self.workers)} rollout workers ({self.spec.worker_cpus:g} CPU each) and "
                f"{sum(len(r) for r in self.replicas.values())} environment replicas were not all running after "
                f"{self.spec.start_timeout_s:g} s; the cluster offers {self.conn.resources().get('CPU', 0):g} CPUs "
                f"on {self.conn.alive_nodes()} nodes",
                hint="lower ?workers= or ?worker_cpus= in --cluster, add nodes, or raise ?start_timeout_s=") from None
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc
            if isinstance(cause, PalaestraError):  # e.g. a bad model spec: its own message and fix say it best
                raise cause from None
            raise ClusterError(f"starting the run's actors on the cluster failed: {type(cause).__name__}: {cause}",
                               hint="is palaestra installed (same version) on every node? see the message above"
                               ) from None
        for slot, info in zip(self.workers, answers[len(answers) - len(self.workers):]):
            slot.info = info
        self.replica_nodes = {a.get("node_id") for a in answers[:len(answers) - len(self.workers)]}

    def placement_report(self) -> dict[str, Any]:
        nodes = {w.info.get("node_id") for w in self.workers}
        return {"workers": len(self.workers), "nodes": len(nodes),
                "replicas": {k: len(v) for k, v in self.replicas.items()}, "replica_nodes": len(self.replica_nodes)}

    async def acquire(self) -> WorkerSlot:
        """The healthy worker with the fewest attempts in flight; waits while all are being checked."""
        async with self._changed:
            while True:
                healthy = [w for w in self.workers if w.healthy]
                if healthy:
                    slot = min(healthy, key=lambda w: w.in_flight)
                    slot.in_flight += 1
                    return slot
                if not self.workers:
                    raise ClusterError("every rollout worker is gone (their nodes died or they crashed repeatedly)",
                                       hint="check the cluster (`ray status`) and resume the run with the same --out")
                await self._changed.wait()

    async def release(self, slot: WorkerSlot) -> None:
        async with self._changed:
            slot.in_flight -= 1
            self._changed.notify_all()

    def suspect(self, slot: WorkerSlot) -> None:
        """An actor error on this worker: hold it back until a ping says it is back (restarted) or gone."""
        if not slot.healthy or slot not in self.workers:
            return
        slot.healthy = False
        task = asyncio.ensure_future(self._check(slot))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    async def _check(self, slot: WorkerSlot) -> None:
        try:
            slot.info = await asyncio.wait_for(slot.actor.ping.remote(), PING_TIMEOUT_S)
            alive = True
        except Exception:  # died for good (restarts spent), or not back in time
            alive = False
        async with self._changed:
            if alive:
                slot.healthy = True
            else:
                self.workers.remove(slot)
                self._kill(slot.actor)
            self._changed.notify_all()

    def _kill(self, actor: Any) -> None:
        try:
            self.conn.ray.kill(actor, no_restart=True)
        except Exception:  # already gone
            pass

    async def stop(self) -> None:
        for task in list(self._checks):
            task.cancel()
        if self.workers:
            refs = [w.actor.shutdown.remote() for w in self.workers]
            await asyncio.wait([asyncio.ensure_future(_quiet(r)) for r in refs], timeout=15)
        for w in self.workers:
            self._kill(w.actor)
        for replicas in self.replicas.values():
            for r in replicas:
                self._kill(r)
        self.workers, self.replicas = [], {}


async def _quiet(ref: Any) -> None:
    try:
        await ref
    except Exception:  # a worker that cannot shut down cleanly is killed next anyway
        pass
