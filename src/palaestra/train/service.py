"""The rollout service for trainers: submit tasks, a group size and a policy endpoint; take finished
groups as they complete.

Asynchronous RL needs three guarantees from its rollout side, and this is where they live:

- **Staleness is bounded.** Each group records the policy version it was sampled with. The trainer
  reports its version (``set_policy_version``); a group more than ``max_staleness`` versions behind is
  never delivered (cancelled if still running), and its task is sampled again. Sampling also never runs
  more than ``max_buffered_groups`` ahead of what the trainer has taken.
- **Stragglers cannot stall training.** Past ``group_deadline_s`` the unfinished members of a group are
  cancelled and the group dropped or padded with stand-ins, or waited for, by ``straggler_policy``.
- **Everything that is discarded is logged** (``Job.events`` and the ``palaestra.train.service`` logger).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal, cast

from palaestra.agents.registry import make_agent
from palaestra.core.errors import ConfigError
from palaestra.core.records import Outcome, Rollout, Task
from palaestra.models.base import ModelBackend
from palaestra.placement import MountedEnv
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy
from palaestra.train.service_types import Group, JobSpec

log = logging.getLogger("palaestra.train.service")


class Job:
    """One submission in progress. Iterate it (``async for group in job``) or call ``next_group``."""

    def __init__(self, spec: JobSpec, envs: dict[str, MountedEnv], backend: ModelBackend, owns_backend: bool,
                 *, with_reference: bool = False) -> None:
        self.id = uuid.uuid4().hex[:12]
        self._with_reference = with_reference  # the scripted oracle plays each task's reference back
        self.spec = spec
        self.version = spec.policy_version
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=2000)
        self.counts: collections.Counter[str] = collections.Counter()
        self._envs = envs
        self._backend = backend
        self._owns_backend = owns_backend
        self._proxy = ModelProxy(backend)
        self._model_name = spec.model_label(backend)
        self._agent = make_agent(spec.agent, max_steps=spec.max_steps)
        self._pending: collections.deque[Task] = collections.deque(spec.tasks)
        self._ready: collections.deque[Group] = collections.deque()
        self._flight: dict[asyncio.Task[Group | None], tuple[int, int, Task]] = {}  # version, group id, task
        self._ids = itertools.count()
        self._tasks: dict[int, Task] = {}  # group id -> its task, until delivered (a stale one is re-queued)
        self._wake = asyncio.Event()
        self._changed = asyncio.Condition()
        self._cancelled = False
        self._runner = asyncio.create_task(self._run())

    # ---- trainer side ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._runner.done() and not self._ready

    def set_policy_version(self, version: int) -> None:
        """The trainer's weights moved on: groups now too stale are cancelled (and re-queued)."""
        self.version = version
        bound = self.spec.max_staleness
        if bound is not None:
            for runner, (gversion, _, task) in list(self._flight.items()):
                if version - gversion > bound and not runner.done():
                    runner.cancel()
                    self._stale(task, gversion, "cancelled in flight")
        self._wake.set()

    def add_tasks(self, tasks: list[Task]) -> None:
        if self._runner.done():
            raise ConfigError(f"job {self.id} has finished", hint="submit a new job for more tasks")
        for t in tasks:
            self._check_env(t)
        self._pending.extend(tasks)
        self._wake.set()

    async def next_group(self, timeout: float | None = None) -> Group | None:
        """The next deliverable group; ``None`` when the job is done (or ``timeout`` passed first)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        async with self._changed:
            while True:
                while self._ready:
                    group = self._ready.popleft()
                    self._wake.set()  # room in the buffer: the scheduler may launch more
                    bound = self.spec.max_staleness
                    task = self._tasks.pop(group.group_id)
                    if bound is not None and self.version - group.policy_version > bound:
                        self._stale(task, group.policy_version, "finished too late")
                        continue
                    self.counts["delivered"] += 1
                    return group
                if self._runner.done():
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                try:
                    await asyncio.wait_for(self._changed.wait(), left)
                except asyncio.TimeoutError:
                    return None

    async def __aiter__(self) -> AsyncIterator[Group]:
        while (group := await self.next_group()) is not None:
            yield group

    async def cancel(self) -> None:
        self._cancelled = True
        self._wake.set()
        await asyncio.gather(self._runner, return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        return {"job_id": self.id, "done": self.done, "policy_version": self.version,
                "pending_tasks": len(self._pending), "groups_in_flight": len(self._flight),
                "groups_ready": len(self._ready), "counts": dict(self.counts),
                "events": list(self.events)[-100:]}

    # ---- scheduler ------------------------------------------------------------------------------
    def _event(self, kind: str, level: int = logging.INFO, **fields: Any) -> None:
        self.counts[kind] += 1
        self.events.append({"t": time.time(), "event": kind, **fields})
        log.log(level, "job %s: %s %s", self.id, kind, fields)

    def _stale(self, task: Task, gversion: int, how: str) -> None:
        self._event("stale_group_dropped", logging.WARNING, task_id=task.id, group_version=gversion,
                    policy_version=self.version, how=how, requeued=self.spec.requeue_stale)
        if self.spec.requeue_stale and not self._cancelled:
            self._pending.append(task)
            self._wake.set()

    def _check_env(self, task: Task) -> None:
        if task.env not in self._envs:
            raise ConfigError(f"task '{task.id}' names environment '{task.env}', which this job did not mount",
                              hint="submit it in a job whose tasks include that environment")

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _run(self) -> None:
        spec = self.spec
        try:
            while not self._cancelled:
                while (self._pending and len(self._flight) < spec.max_groups_in_flight
                       and len(self._flight) + len(self._ready) < spec.max_buffered_groups):
                    task, gid = self._pending.popleft(), next(self._ids)
                    self._tasks[gid] = task
                    runner = asyncio.create_task(self._group(gid, task, self.version))
                    self._flight[runner] = (self.version, gid, task)
                if not self._flight and not self._pending:
                    break
                self._wake.clear()
                waiter: asyncio.Task[Any] = asyncio.create_task(self._wake.wait())
                waitables: set[asyncio.Task[Any]] = {*self._flight, waiter}
                done, _ = await asyncio.wait(waitables, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                for finished in done:
                    if finished is waiter:
                        continue
                    runner = cast("asyncio.Task[Group | None]", finished)
                    _, gid, _ = self._flight.pop(runner)
                    group = None if runner.cancelled() else self._result(runner)
                    if group is None:
                        self._tasks.pop(gid, None)
                    else:
                        self._ready.append(group)
                await self._notify()
        finally:
            for runner in self._flight:
                runner.cancel()
            await asyncio.gather(*self._flight, return_exceptions=True)
            self._flight.clear()
            if self._owns_backend:
                await self._backend.aclose()
            await self._notify()

    def _result(self, runner: asyncio.Task[Group | None]) -> Group | None:
        """A group runner's group; a crash in it (a bug) is logged and costs only that group."""
        exc = runner.exception()
        if exc is not None:
            self._event("group_failed", logging.ERROR, error=f"{type(exc).__name__}: {exc}")
            return None
        return runner.result()

    async def _member(self, task: Task, index: int) -> Rollout:
        sampling = dict(self.spec.sampling)
        if isinstance(sampling.get("seed"), int):
            sampling["seed"] += index
        rid = uuid.uuid4().hex
        try:
            return await run_rollout(task, env=self._envs[task.env].client, agent=self._agent, proxy=self._proxy,
                                     model_name=self._model_name,
                                     repeat=index, deadline_s=self.spec.rollout_deadline_s, sampling=sampling,
                                     with_reference=self._with_reference, rollout_id=rid)
        finally:
            self._proxy.unregister(rid)
            forget = getattr(self._backend, "forget", None)
            if forget is not None:
                forget(rid)

    async def _group(self, gid: int, task: Task, version: int) -> Group | None:
        spec, started = self.spec, time.time()
        members = [asyncio.create_task(self._member(task, i)) for i in range(spec.group_size)]
        try:
            _, pending = await asyncio.wait(members, timeout=spec.group_deadline_s)
        except asyncio.CancelledError:
            for m in members:
                m.cancel()
            await asyncio.gather(*members, return_exceptions=True)
            raise
        status: Literal["complete", "padded", "late"] = "complete"
        if pending and spec.straggler_policy == "wait":
            self._event("stragglers_waited_for", logging.WARNING, group_id=gid, task_id=task.id, running=len(pending),
                        deadline_s=spec.group_deadline_s)
            await asyncio.wait(pending)
            pending, status = set(), "late"
        elif pending:
            for m in pending:
                m.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            finished = len(members) - len(pending)
            self._event("stragglers_cancelled", logging.WARNING, group_id=gid, task_id=task.id, cancelled=len(pending),
                        finished=finished, deadline_s=spec.group_deadline_s)
            if spec.straggler_policy == "drop" or finished == 0:
                self._event("partial_group_dropped", logging.WARNING, group_id=gid, task_id=task.id,
                            finished=finished, group_size=spec.group_size)
                return None
            status = "padded"
        rollouts, padded = [], []
        for i, m in enumerate(members):
            if m in pending:
                padded.append(i)
                rollouts.append(_stand_in(task, i, spec.group_deadline_s or 0.0, self._model_name))
            else:
                rollouts.append(m.result())
        if padded:
            self._event("group_padded", logging.WARNING, group_id=gid, task_id=task.id, padded=padded)
        return Group(job_id=self.id, group_id=gid, task_id=task.id, env=task.env, policy_version=version,
                     status=status, rollouts=rollouts, padded=padded, started_at=started, wall_s=time.time() - started)


def _stand_in(task: Task, index: int, deadline_s: float, model: str) -> Rollout:
    return Rollout(rollout_id=uuid.uuid4().hex, task_id=task.id, env=task.env, agent="", model=model, repeat=index,
                   outcome=Outcome(status="timed_out", kind="straggler",
                                   message=f"cancelled: still running {deadline_s:g} s after its group started"),
                   started_at=time.time(), tags=["padded"])
