"""``--cluster local?workers=N``: the multi-process collector of one machine, without Ray.

One collector process runs on one core. This one (the driver) starts N worker processes
(``cluster/procworker.py``), each with its own event loop, environments, model backends and agents, and
hands them (task, repeat, attempt) items a few at a time, so a worker that runs slower simply takes
fewer. Every record comes back to the driver already encoded, and the driver alone appends it to the one
journal (group commit, fsync) before acknowledging it: the run directory, resume, metrics and reports are
exactly those of a one-process run, and the driver's own share of the work per rollout is a read, a
JSON decode of the record's identity and a write.

Guarantees, as for the one-process collector:

- an attempt counts once it is fsynced in the journal; a worker waits for that before its next attempt;
- a driver killed mid-run (SIGKILL) takes its workers with it (they see their input close and stop),
  and resume runs exactly the (task, repeat) slots without a scored record;
- a worker that dies mid-run (killed, out of memory) loses only its in-flight attempts: each is journaled
  as failed(agent) and run again by another worker (a new one is started in its place);
- an error that stops a worker (a bad environment spec, a journal it cannot reach) stops the run with it.

Ray's collector (``cluster/driver.py``) pays a remote call per attempt, which on one machine costs more
than the attempt itself (docs/performance.md); this is the mode for every core of one machine, Ray the
one for more than one machine.
"""

from __future__ import annotations

import asyncio
import collections
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from palaestra.cluster.driver import CLUSTER_JSON, lost_attempt, resolved_env_specs
from palaestra.cluster.spec import parse_cluster
from palaestra.core.errors import ConfigError, InvalidTask, PalaestraError
from palaestra.core.records import Rollout, Task
from palaestra.rollout import rundir
from palaestra.rollout.collector import ProgressFn, run_all_or_none
from palaestra.rollout.compact import compact_rollout
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal import Journal

STOP_GRACE_S = 20.0  # a worker told to stop may still be closing its environments and model clients
CHUNK = 1 << 18  # bytes read from a worker's pipe at a time
Key = tuple[str, int]  # (task id, repeat): one slot of the run


class WorkerError(PalaestraError):
    """A worker stopped on an error that would stop a one-process run too; it names the worker."""


@dataclass
class Slot:
    """One worker's place: the process now in it, and the items it holds (key → [task index, next attempt,
    order sent]); ``started`` is how many of those sent the worker has begun, as it last said."""

    index: int
    lanes: int
    proc: asyncio.subprocess.Process | None = None
    held: dict[Key, list[int]] = field(default_factory=dict)
    records: int = 0  # records of this slot's workers journaled
    pids: list[int] = field(default_factory=list)
    ended: bool = False  # told E
    sent: int = 0
    cpu: list[dict[str, float]] = field(default_factory=list)  # CPU seconds of each worker that finished
    started: int = 0


def _error_from(body: dict[str, Any], slot: Slot) -> PalaestraError:
    message = f"worker process {slot.index}: {body.get('type')}: {body.get('message')}"
    hint = body.get("hint")
    kind = body.get("kind")
    if kind == "config":
        return ConfigError(message, hint=hint)
    if kind == "invalid_task":
        return InvalidTask(message, hint=hint)
    return WorkerError(message, kind=kind if isinstance(kind, str) else None, hint=hint)


class ProcessCollector:
    """Drop-in for ``rollout.collector.Collector`` when ``cfg.cluster`` is ``local``: same constructor,
    same ``collect(pending)``."""

    def __init__(self, cfg: RunConfig, run_dir: Path, tasks: list[Task], *,
                 on_rollout: ProgressFn | None = None) -> None:
        spec = parse_cluster(cfg.cluster or "local")
        if spec.backend != "local":
            raise ConfigError(f"ProcessCollector runs --cluster local, not '{cfg.cluster}'",
                              hint="use RayCollector for a Ray cluster")
        if cfg.placement == "ray":
            raise ConfigError("--placement ray needs a Ray cluster; --cluster local runs its environments "
                              "inside each worker process", hint="use --placement direct or local, or --cluster ray")
        self.cfg, self.run_dir, self.tasks, self.on_rollout = cfg, run_dir, tasks, on_rollout
        self.workers = spec.workers or os.cpu_count() or 1
        self.index = {t.id: i for i, t in enumerate(tasks)}
        self.queue: collections.deque[tuple[int, int, int]] = collections.deque()  # (task index, repeat, attempt)
        self.left = 0  # slots not yet final
        self.lost = self.restarts = 0
        self.max_restarts = 3 * self.workers
        self.slots: list[Slot] = []
        self.journal: Journal | None = None
        self.all_done = asyncio.Event()

    def _worker_cfg(self, lanes: int) -> dict[str, Any]:
        """The run's config as one worker runs it: its share of the concurrency and of an explicit session
        cap (each worker holds its own environments, so each holds its own sessions)."""
        update: dict[str, Any] = {"concurrency": lanes}
        if self.cfg.max_sessions is not None:
            update["max_sessions"] = max(1, math.ceil(self.cfg.max_sessions / self.workers))
        return self.cfg.model_copy(update=update).model_dump(mode="json")

    def _setup_line(self, slot: Slot) -> bytes:
        samples: dict[tuple[str, str, str], int] = {}
        for i, t in enumerate(self.tasks):
            samples.setdefault((t.env, t.agent or self.cfg.agent, t.model or self.cfg.model), i)
        body = {"cfg": self._worker_cfg(slot.lanes), "run_dir": str(self.run_dir), "index": slot.index,
                "envs": resolved_env_specs(self.tasks),
                "samples": [[i, self.tasks[i].id] for i in sorted(samples.values())],
                "progress": self.on_rollout is not None}
        return orjson.dumps(body) + b"\n"

    async def collect(self, pending: list[tuple[Task, int, int]]) -> None:
        if not (self.run_dir / rundir.TASKS).is_file():
            raise ConfigError(f"{self.run_dir / rundir.TASKS} is missing: worker processes read the run's tasks there",
                              hint="run through palaestra eval run (or run_eval), which writes it first")
        for task, repeat, first in pending:
            self.queue.append((self.index[task.id], repeat, first))
        self.left = len(pending)
        if not pending:
            return
        n = min(self.workers, len(pending))
        lanes = max(1, math.ceil(self.cfg.concurrency / n))
        self.slots = [Slot(i, lanes) for i in range(n)]
        started, cpu0 = time.time(), time.process_time()
        try:
            async with Journal(self.run_dir / rundir.JOURNAL) as journal:
                self.journal = journal
                await run_all_or_none([self._supervise(slot) for slot in self.slots])
        finally:
            rundir.write_json_atomic(self.run_dir / CLUSTER_JSON, {
                "backend": "local", "workers": n, "lanes_per_worker": lanes, "started_at": started,
                "pids": [s.pids for s in self.slots], "rollouts_by_worker": [s.records for s in self.slots],
                "lost_attempts": self.lost, "restarts": self.restarts,
                "driver_cpu_s": round(time.process_time() - cpu0, 3), "worker_cpu_s": [s.cpu for s in self.slots]})

    # ---- one worker's lifetime ---------------------------------------------------------------------

    async def _supervise(self, slot: Slot) -> None:
        """Run the slot's worker until the work is done; start a new one in its place if it dies."""
        while True:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "palaestra.cluster.procworker", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=None)
            slot.proc, slot.ended, slot.sent, slot.started = proc, False, 0, 0
            slot.pids.append(proc.pid)
            try:
                assert proc.stdin is not None
                proc.stdin.write(self._setup_line(slot))
                self._feed(slot)
                if await self._read(slot):
                    await proc.wait()
                    return
                code = await proc.wait()
                await self._lose(slot, f"rollout worker process {slot.index} (pid {proc.pid}) exited with code "
                                       f"{code} mid-rollout")
            finally:
                await self._stop(proc)
            if self.all_done.is_set():  # nothing left for a new worker to do
                return
            self.restarts += 1
            if self.restarts > self.max_restarts:
                raise WorkerError(f"rollout worker processes died {self.restarts} times; giving up",
                                  kind="agent", hint="see the workers' errors above; resume the run once fixed")

    async def _read(self, slot: Slot) -> bool:
        """Journal what the worker sends until it is done (True) or its output ends (False: it died)."""
        proc = slot.proc
        assert proc is not None and proc.stdout is not None
        buf = bytearray()
        commits: list[asyncio.Task[None]] = []
        done = False
        try:
            while chunk := await proc.stdout.read(CHUNK):
                buf += chunk
                end = buf.rfind(b"\n") + 1
                if not end:
                    continue
                lines: list[bytes] = []
                metas: list[tuple[bytes, bytes]] = []
                last_seq = 0
                # orjson never writes a raw line break (it escapes them in strings), so lines split cleanly
                for msg in bytes(buf[:end]).splitlines(keepends=True):
                    op = msg[:1]
                    if op == b"R":
                        seq, started, rest = msg[2:].split(b" ", 2)
                        last_seq, slot.started = int(seq), int(started)
                        meta, light, line = rest.split(b"\t", 2)
                        metas.append((meta, light))
                        lines.append(line)
                    elif op == b"D":
                        done = True
                        slot.cpu.append(orjson.loads(msg[2:]))
                    elif op == b"X":
                        raise _error_from(orjson.loads(msg[2:]), slot)
                    # S: the worker is set up; nothing to do
                del buf[:end]
                for c in commits:
                    if c.done() and c.exception() is not None:  # the journal failed: that ends the run
                        raise c.exception()  # type: ignore[misc]
                commits = [c for c in commits if not c.done()]
                if lines:
                    commits.append(asyncio.ensure_future(self._commit(slot, lines, metas, last_seq)))
                    del lines, metas
            await asyncio.gather(*commits)  # what it sent before it ended is journaled all the same
        finally:
            for c in commits:
                c.cancel()
            await asyncio.gather(*commits, return_exceptions=True)
        return done

    async def _commit(self, slot: Slot, lines: list[bytes], metas: list[tuple[bytes, bytes]], last_seq: int) -> None:
        assert self.journal is not None
        await self.journal.append_lines(lines)
        proc = slot.proc
        if proc is not None and proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.write(b"A %d\n" % last_seq)
        for meta, light in metas:
            task_id, repeat, attempt, final = orjson.loads(meta)
            self._settle(slot, task_id, repeat, attempt, final, light)
        slot.records += len(lines)
        self._feed(slot)

    def _settle(self, slot: Slot, task_id: str, repeat: int, attempt: int, final: bool, light: bytes) -> None:
        """Account for one journaled record (as its worker described it): its slot is final once scored,
        refused for good, or out of attempts; otherwise the worker retries it (and holds it meanwhile)."""
        key = (task_id, repeat)
        if self.on_rollout is not None and light:
            # identity, outcome, verdict, usage and timings; the trajectory stays in the journal
            self.on_rollout(Rollout.model_validate_json(light), final)
        if final:
            if slot.held.pop(key, None) is not None:
                self._one_final()
        elif key in slot.held:
            slot.held[key][1] = attempt + 1

    def _one_final(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.all_done.set()
            for s in self.slots:
                self._end(s)

    def _feed(self, slot: Slot) -> None:
        """Top the worker up to eight times its lanes, so its lanes never wait for the next item while this
        process waits for a core and an fsync, and it is written to fewer times; but never beyond its fair
        share of what is left, so a small run is spread over all workers."""
        proc = slot.proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            return
        items = []
        share = math.ceil((len(self.queue) + sum(len(s.held) for s in self.slots)) / max(len(self.slots), 1))
        while self.queue and len(slot.held) < min(8 * slot.lanes, max(share, 1)):
            index, repeat, attempt = self.queue.popleft()
            task_id = self.tasks[index].id
            slot.held[(task_id, repeat)] = [index, attempt, slot.sent]
            slot.sent += 1
            items.append([index, task_id, repeat, attempt])
        if items:
            proc.stdin.write(b"I " + orjson.dumps(items) + b"\n")
        if self.all_done.is_set():
            self._end(slot)

    def _end(self, slot: Slot) -> None:
        proc = slot.proc
        if not slot.ended and proc is not None and proc.stdin is not None and not proc.stdin.is_closing():
            slot.ended = True
            proc.stdin.write(b"E\n")

    async def _lose(self, slot: Slot, message: str) -> None:
        """The worker died: journal each attempt it had begun as failed(agent) and queue the next one;
        the items it had not begun go back to the queue as they were (as resume would run them)."""
        assert self.journal is not None
        held, slot.held = slot.held, {}
        for (_task_id, repeat), (index, attempt, order) in sorted(held.items(), key=lambda kv: -kv[1][2]):
            if order >= slot.started:
                self.queue.appendleft((index, repeat, attempt))
                continue
            task = self.tasks[index]
            self.lost += 1
            await self.journal.append(compact_rollout(
                lost_attempt(task, self.cfg, repeat, attempt, time.time(), message), task))
            if attempt + 1 < self.cfg.max_attempts:
                self.queue.appendleft((index, repeat, attempt + 1))
            else:
                self._one_final()
        for other in self.slots:  # survivors take the work back while a new worker starts
            if other is not slot:
                self._feed(other)

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        """End of input tells a worker to stop; one that does not is killed (by its own pid). Waited for
        even when the run is being cancelled (another worker's error stops them all), so no worker
        outlives the run."""
        if proc.returncode is None and proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        waiter = asyncio.ensure_future(_wait_or_kill(proc))
        try:
            await asyncio.shield(waiter)
        except asyncio.CancelledError:
            await waiter
            raise


async def _wait_or_kill(proc: asyncio.subprocess.Process) -> None:
    try:
        await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
