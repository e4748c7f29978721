"""One worker process of ``--cluster local`` (``python -m palaestra.cluster.procworker``): its own event
loop, its own environments, model backends and agents, running the share of rollouts the driver hands
it, exactly as the single-process collector runs them (``Collector._one``: attempts, retries, cascades).

It never writes the journal. Each attempt's record is encoded here (compacted and serialized: the costly
part, done on this core) and sent to the driver, which appends it to the one journal; the attempt counts
once the driver says it is fsynced, as ``Journal.append`` returns once it is fsynced in one process. So a
driver killed mid-run loses only unacknowledged attempts, and resume runs exactly those again.

The protocol, one message a line, over this process's stdin and its original stdout (print() and
logging go to stderr, never into the protocol):

    driver → worker   setup JSON (first line) | I [[task index, task id, repeat, attempt], ...] | A seq | E
    worker → driver   S (set up) | R seq started <meta JSON> TAB <light JSON> TAB <journal line>
                      | D <CPU JSON> (done) | X <error JSON> (the run must stop)

``A seq`` acknowledges every record up to ``seq``; ``E`` says no work is left. ``started`` counts the items
this worker has begun so far (in the order they came): should it die, the driver charges an attempt to
those only, and hands the others on untouched. The meta JSON is what the driver needs of the record
without reading it: ``[task id, repeat, attempt, final]``, ``final`` as ``attempts_until_scored``
decides it; the light JSON (empty unless the driver reports progress) is the record without its
trajectory, which the driver parses straight into a ``Rollout`` for its progress callback. End of
input without ``E`` means the driver is gone: the worker stops its rollouts, releases what it started,
and exits.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from palaestra.core.errors import PalaestraError
from palaestra.core.records import Task
from palaestra.rollout.collector import DETERMINISTIC_KINDS, Collector
from palaestra.rollout.config import RunConfig
from palaestra.rollout.gc_batch import tune_gc_for_batch
from palaestra.rollout.journal import encode_record

Item = tuple[Task, int, int]  # (task, repeat, first attempt)
_REFUSED = tuple(f"{k}:" for k in DETERMINISTIC_KINDS)  # failures never retried (rollout/collector.py)


class DriverGone(Exception):
    """The driver's end of the pipe closed before it said the work was done."""


class Channel:
    """The worker's end of the pipes: coalesced writes, and acks that release waiting appends."""

    def __init__(self, out_fd: int, max_attempts: int = 1, progress: bool = False) -> None:
        self.out_fd = out_fd
        self.max_attempts, self.progress = max_attempts, progress
        self.window = 64  # unacknowledged records before an append waits for its acknowledgement
        self.transport: asyncio.WriteTransport | None = None
        self.buf: list[bytes] = []
        self.seq = 0
        self.started = 0  # items taken by a lane so far
        self.cpu_setup_s = 0.0  # CPU this process spent starting: imports and setting up its resources
        self.waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self.gone = False

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self.transport, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(self.out_fd, "wb", 0))

    def send(self, data: bytes) -> None:
        if not self.buf:  # one write per loop iteration, however many records finished in it
            asyncio.get_running_loop().call_soon(self.flush)
        self.buf.append(data)

    def flush(self) -> None:
        if self.buf and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self.buf))
        self.buf.clear()

    async def append(self, record: Any, *, line: bytes | None = None) -> None:
        """The ``Appender`` the collector journals through: returns once the driver has fsynced it.
        ``line``: the record already encoded (``Journal.append``'s), sent as it is."""
        if self.gone:
            raise DriverGone("the driver is gone; this record cannot be journaled")
        self.seq += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append((self.seq, fut))
        data = record.model_dump(mode="json") if isinstance(record, BaseModel) else record  # compaction failed
        outcome = data.get("outcome") or {}
        attempt = int(data.get("attempt", 0))
        final = (outcome.get("status") == "scored" or attempt + 1 >= self.max_attempts
                 or (outcome.get("status") == "failed" and str(outcome.get("message") or "").startswith(_REFUSED)))
        light = orjson.dumps({k: v for k, v in data.items() if k not in ("trajectory", "compact")}
                             ) if self.progress else b""
        meta = orjson.dumps([data.get("task_id"), data.get("repeat", 0), attempt, final])
        self.send(b"R %d %d %b\t%b\t%b" % (self.seq, self.started, meta, light,
                                            line if line is not None else encode_record(data)))
        del record, data
        if not final or len(self.waiting) > self.window:
            await fut  # a retry starts after its failed attempt is journaled, as in one process
        # A final record need not hold its lane until the driver's fsync comes back (a round trip through
        # another process, late on a busy machine): until it is acknowledged it does not count, so a
        # driver killed meanwhile has it run again on resume, exactly as an attempt still running.

    def ack(self, upto: int) -> None:
        while self.waiting and self.waiting[0][0] <= upto:
            _, fut = self.waiting.popleft()
            if not fut.done():
                fut.set_result(None)

    def fail_all(self) -> None:
        self.gone = True
        while self.waiting:
            _, fut = self.waiting.popleft()
            if not fut.done():
                fut.set_exception(DriverGone("the driver is gone; this record was never acknowledged"))
                fut.exception()  # a final record's append did not wait for it: nobody else will read it


class TaskLines:
    """The run's tasks.jsonl, read one line at a time as items name them: a worker parses only the tasks
    of its share, and checks each against the id the driver expects."""

    def __init__(self, path: Path) -> None:
        with path.open("rb") as fh:
            self.lines = [line for line in fh if line.strip()]
        self.cache: dict[int, Task] = {}

    def get(self, index: int, task_id: str) -> Task:
        task = self.cache.get(index)
        if task is None:
            # straight from JSON (pydantic's Rust parser): 7 µs a task, a third of decoding it and then
            # building it (model_construct is Python, and slower still)
            task = self.cache[index] = Task.model_validate_json(self.lines[index])
        if task.id != task_id:
            raise PalaestraError(f"tasks.jsonl line {index + 1} is task '{task.id}', the driver expected "
                                 f"'{task_id}'", kind="config", hint="do not edit a run's tasks.jsonl while it runs")
        return task


async def _read_input(reader: asyncio.StreamReader, chan: Channel, queue: asyncio.Queue[Item | None],
                      tasks: TaskLines, lanes: int) -> None:
    """Apply the driver's messages until it says ``E`` (then stop the lanes) or goes away (raise)."""
    while True:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            raise DriverGone("the driver closed the pipe")
        op = line[:1]
        if op == b"A":
            chan.ack(int(line[2:]))
        elif op == b"I":
            for index, task_id, repeat, first in orjson.loads(line[2:]):
                queue.put_nowait((tasks.get(index, task_id), repeat, first))
        elif op == b"E":
            for _ in range(lanes):
                queue.put_nowait(None)
            return
        else:
            raise PalaestraError(f"worker got an unknown message {line[:40]!r}", kind="config")


async def _lane(collector: Collector, queue: asyncio.Queue[Item | None], chan: Channel) -> None:
    while (item := await queue.get()) is not None:
        chan.started += 1
        task, repeat, first = item
        await collector._one(task, repeat, first, chan)  # the single-process collector's own loop


async def serve(setup: dict[str, Any], reader: asyncio.StreamReader, chan: Channel) -> None:
    from palaestra.envs.registry import register_alias

    for name, spec in setup["envs"].items():
        register_alias(name, spec)
    cfg = RunConfig.model_validate(setup["cfg"])
    chan.max_attempts, chan.progress = cfg.max_attempts, bool(setup.get("progress"))
    chan.window = 2 * max(1, cfg.concurrency)
    run_dir = Path(setup["run_dir"])
    tasks = TaskLines(run_dir / "tasks.jsonl")
    # one task per (env, agent, model) the run uses: what the collector sets its resources up from
    samples = [tasks.get(i, tid) for i, tid in setup["samples"]]
    collector = Collector(cfg, run_dir, samples)
    lanes = max(1, cfg.concurrency)
    queue: asyncio.Queue[Item | None] = asyncio.Queue()
    await collector._setup()
    chan.cpu_setup_s = time.process_time()
    try:
        chan.send(b"S\n")
        workers = [asyncio.ensure_future(_lane(collector, queue, chan)) for _ in range(lanes)]
        feeder = asyncio.ensure_future(_read_input(reader, chan, queue, tasks, lanes))
        acks: asyncio.Future[None] | None = None
        try:
            # The feeder returns on E (or raises: the driver is gone); a lane raises only on what would stop
            # a one-process run too. Either way the first exception stops this worker.
            waiting: set[asyncio.Future[None]] = {feeder, *workers}
            while waiting:
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_EXCEPTION)
                for t in done:
                    if t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
                if feeder in done and acks is None:  # after E, acks still arrive until the lanes are done
                    acks = asyncio.ensure_future(_acks_only(reader, chan))
        except BaseException:
            feeder.cancel()
            for w in workers:
                w.cancel()
            await asyncio.gather(feeder, *workers, return_exceptions=True)
            raise
        finally:
            if acks is not None:
                acks.cancel()
    finally:
        chan.fail_all()
        await collector._teardown()


async def _acks_only(reader: asyncio.StreamReader, chan: Channel) -> None:
    while True:
        line = await reader.readline()
        if not line.endswith(b"\n"):
            chan.fail_all()  # the driver died after E: nothing waiting can be acknowledged any more
            return
        if line[:1] == b"A":
            chan.ack(int(line[2:]))


def _error_message(exc: BaseException) -> bytes:
    body = {"type": type(exc).__name__, "message": getattr(exc, "message", None) or str(exc),
            "kind": getattr(exc, "kind", None),
            "hint": getattr(exc, "hint", None)}
    return b"X " + orjson.dumps(body) + b"\n"


async def amain(out_fd: int) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    chan = Channel(out_fd)
    await chan.open()
    first = await reader.readline()
    if not first.endswith(b"\n"):
        return 1
    try:
        await serve(orjson.loads(first), reader, chan)
    except DriverGone:
        return 1  # nobody to tell
    except Exception as exc:
        chan.send(_error_message(exc))
        chan.flush()
        await asyncio.sleep(0)
        return 2
    cpu = {"setup_s": round(chan.cpu_setup_s, 3), "collect_s": round(time.process_time() - chan.cpu_setup_s, 3)}
    chan.send(b"D " + orjson.dumps(cpu) + b"\n")
    chan.flush()
    assert chan.transport is not None
    chan.transport.close()
    await asyncio.sleep(0)
    return 0


def main() -> None:
    # The protocol owns the original stdout; whatever else prints goes to stderr.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    # Ctrl-C reaches the whole process group: the driver decides, and closes this worker's input.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tune_gc_for_batch()  # as the CLI does for a one-process run
    sys.exit(asyncio.run(amain(out_fd)))


if __name__ == "__main__":
    main()
