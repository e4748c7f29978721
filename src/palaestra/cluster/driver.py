"""The driver side of ``--cluster ray``: the same loop as the single-process collector, except that each
attempt runs in a rollout worker actor somewhere on the cluster. Results come back as they finish and are
journaled here, so the run directory, resume, metrics and reports are exactly those of a local run.

An attempt whose worker died (node lost, process killed) is journaled as failed(agent) and retried on
another worker; an attempt whose environment replica died comes back failed(environment) from the
worker and is retried the same way. Either way nothing is lost and nothing is scored twice."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from palaestra.cluster.fleet import Fleet, WorkerSlot
from palaestra.cluster.runtime import connect
from palaestra.cluster.spec import ClusterSpec, parse_cluster
from palaestra.core.errors import ConfigError
from palaestra.core.records import Outcome, Rollout, Task
from palaestra.core.secrets import redact_url
from palaestra.rollout import rundir
from palaestra.rollout.collector import ProgressFn, attempts_until_scored, drain
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal import Journal
from palaestra.rollout.runner import new_rollout_id

CLUSTER_JSON = "cluster.json"  # where the run's actors ran, and how many attempts were lost with workers
ANSWER_GRACE_S = 120.0  # beyond the rollout deadline, before a silent worker is given up on


def resolved_env_specs(tasks: list[Task]) -> dict[str, str]:
    """Each env name → the spec a worker elsewhere can load: built-ins by name, files by absolute path."""
    from palaestra.envs.registry import spec_for

    out: dict[str, str] = {}
    for name in sorted({t.env for t in tasks}):
        spec = spec_for(name)
        modpart, sep, cls = spec.partition(":")
        if modpart.endswith(".py") or "/" in modpart or modpart.startswith("."):
            spec = str(Path(modpart).resolve()) + sep + cls
        out[name] = spec
    return out


def lost_attempt(task: Task, cfg: RunConfig, repeat: int, attempt: int, started: float, message: str) -> Rollout:
    """The journal record of an attempt whose worker never answered: failed(agent), never a score."""
    return Rollout(rollout_id=new_rollout_id(), task_id=task.id, env=task.env, agent=task.agent or cfg.agent,
                   model=redact_url(task.model or cfg.model), repeat=repeat, attempt=attempt,
                   outcome=Outcome.failed("agent", message), started_at=started,
                   timings={"total_s": time.time() - started}, tags=list(task.tags))


class RayCollector:
    """Drop-in for ``rollout.collector.Collector`` when ``cfg.cluster`` is set: same constructor, same
    ``collect(pending)``."""

    def __init__(self, cfg: RunConfig, run_dir: Path, tasks: list[Task], *,
                 on_rollout: ProgressFn | None = None) -> None:
        if not cfg.cluster:
            raise ConfigError("RayCollector needs cfg.cluster", hint="pass --cluster ray (or ray:ADDRESS)")
        self.cfg = cfg
        self.spec: ClusterSpec = parse_cluster(cfg.cluster)
        self.run_dir = run_dir
        self.tasks = tasks
        self.on_rollout = on_rollout
        self.fleet: Fleet | None = None
        self.lost = 0  # attempts lost to dead workers (journaled as failed, then retried)
        self.placement: dict[str, Any] = {}

    async def collect(self, pending: list[tuple[Task, int, int]]) -> None:
        conn = connect(self.spec)
        try:
            specs = sorted({t.model or self.cfg.model for t in self.tasks})
            self.fleet = Fleet(conn, self.spec, self.cfg, resolved_env_specs(self.tasks), specs)
            await self.fleet.start()
            self.placement = self.fleet.placement_report()
            async with Journal(self.run_dir / rundir.JOURNAL) as journal:
                # a full disk or no worker left ends it all
                await drain(pending, self.cfg.concurrency, lambda t, r, a: self._one(t, r, a, journal))
        finally:
            if self.fleet is not None:
                await self.fleet.stop()
            conn.close()
            if self.placement:
                rundir.write_json_atomic(self.run_dir / CLUSTER_JSON, {
                    **self.placement, "cluster": redact_url(self.cfg.cluster or ""), "lost_attempts": self.lost})

    async def _attempt(self, task: Task, repeat: int, attempt: int) -> Rollout:
        assert self.fleet is not None
        from ray.exceptions import RayActorError, RayError

        slot: WorkerSlot = await self.fleet.acquire()
        started = time.time()
        ref = slot.actor.run.remote(task.model_dump(mode="json"), repeat, attempt)
        try:
            raw = await asyncio.wait_for(ref, self.cfg.deadline_s + ANSWER_GRACE_S)
            return Rollout.model_validate_json(raw)
        except RayActorError as exc:
            self.fleet.suspect(slot)
            self.lost += 1
            return lost_attempt(task, self.cfg, repeat, attempt, started,
                                f"rollout worker {slot.index} ({slot.info.get('host', '?')}) was lost mid-rollout: "
                                f"{type(exc).__name__}: {_first_line(exc)}")
        except asyncio.TimeoutError:
            self._cancel(ref)
            self.fleet.suspect(slot)
            self.lost += 1
            return lost_attempt(task, self.cfg, repeat, attempt, started,
                                f"rollout worker {slot.index} gave no answer within the deadline "
                                f"({self.cfg.deadline_s:g} s) plus {ANSWER_GRACE_S:g} s")
        except RayError as exc:  # the worker raised: a setup or harness bug, reported with its cause
            cause = getattr(exc, "cause", None) or exc
            return lost_attempt(task, self.cfg, repeat, attempt, started,
                                f"rollout worker {slot.index} raised {type(cause).__name__}: {_first_line(cause)}")
        finally:
            await self.fleet.release(slot)

    @staticmethod
    def _cancel(ref: Any) -> None:
        import ray

        try:
            ray.cancel(ref)  # an async actor task: its coroutine is cancelled, the worker lives on
        except Exception:  # the worker is already gone
            pass

    async def _one(self, task: Task, repeat: int, first_attempt: int, journal: Journal) -> None:
        """Attempts until scored or out of attempts, each journaled before the next starts (as locally)."""
        await attempts_until_scored(lambda n: self._attempt(task, repeat, n), first_attempt, self.cfg.max_attempts,
                                    journal, self.on_rollout, task=task)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""

