"""Run one sandboxed command and collect its output without trusting it.

Three deadlines, all independent: the command's own ``timeout`` (then the provider's tree-killer runs),
a per-stream hard output limit (a program printing forever is stopped, not buffered), and a short drain
deadline after the command ends (a grandchild holding the pipe open cannot hang the runtime).

The fork happens on a dedicated spawner thread, not on the event loop: with a ``preexec_fn`` (cgroups,
rlimits, uid, Landlock, seccomp) ``Popen`` waits until the child has exec'd, and joining a cgroup can
take milliseconds, which would stall every other rollout. The exit is awaited through a pidfd."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from palaestra.sandbox.types import SandboxError

DRAIN_S = 2.0
# Long-lived on purpose: PR_SET_PDEATHSIG fires when the *thread* that forked the child ends.
_SPAWNER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="palaestra-sandbox-spawn")


@dataclass
class Captured:
    returncode: int
    signal: int | None
    stdout: bytes
    stderr: bytes
    stdout_total: int
    stderr_total: int
    timed_out: bool
    output_limit: bool
    duration_s: float
    drain_timed_out: bool = False


class _Sink:
    def __init__(self, cap: int, kill_at: int, on_limit: Callable[[], None]) -> None:
        self.cap, self.kill_at, self.on_limit = cap, kill_at, on_limit
        self.parts: list[bytes] = []
        self.kept = 0
        self.total = 0

    async def pump(self, stream: asyncio.StreamReader) -> None:
        while True:
            chunk = await stream.read(1 << 16)
            if not chunk:
                return
            self.total += len(chunk)
            if self.kept < self.cap:
                piece = chunk[: self.cap - self.kept]
                self.parts.append(piece)
                self.kept += len(piece)
            if self.total > self.kill_at:
                self.on_limit()
                return

    def data(self) -> bytes:
        return b"".join(self.parts)


def _exit_future(proc: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop) -> asyncio.Future[int]:
    """Resolves with the return code; a pidfd on the loop where available, else a waiting thread."""
    fut: asyncio.Future[int] = loop.create_future()

    def done(code: int) -> None:
        if not fut.done():
            fut.set_result(code)

    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        threading.Thread(target=lambda: loop.call_soon_threadsafe(done, proc.wait()), daemon=True).start()
        return fut

    def ready() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        done(proc.wait())

    loop.add_reader(pidfd, ready)
    return fut


async def _reader(loop: asyncio.AbstractEventLoop, pipe: Any) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    reader = asyncio.StreamReader(limit=1 << 20)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader, transport


async def run_captured(
    cmd: Sequence[str], *, timeout: float, cap: int, kill_at: int, kill_tree: Callable[[int], Awaitable[None]],
    stdin: bytes | None = None, env: dict[str, str] | None = None, cwd: str | None = None,
    preexec: Callable[[], None] | None = None, pass_fds: Sequence[int] = (),
    after_exit: Callable[[int], Awaitable[None]] | None = None, direct: bool = False,
) -> Captured:
    """Spawn ``cmd`` in a new session and return what it wrote. ``kill_tree(pid)`` must kill the command
    and everything it started; ``after_exit(pid)`` runs when the command ended by itself (providers
    without a pid namespace use it to kill what the command left behind). ``direct`` means ``cmd[0]`` is
    the user's program (no wrapper): a missing one is exit 127, as in a shell, not a sandbox failure."""
    started = time.monotonic()
    loop = asyncio.get_running_loop()

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(cmd), stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True,
            pass_fds=tuple(pass_fds), close_fds=True, preexec_fn=preexec,
        )

    try:
        proc = await loop.run_in_executor(_SPAWNER, spawn)
    except (FileNotFoundError, PermissionError) as exc:
        if not direct:
            raise SandboxError(f"could not start {cmd[0]!r}: {exc}",
                               hint="is the sandbox tool installed? run `palaestra sandbox info`") from exc
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        msg = f"{cmd[0]}: {'command not found' if code == 127 else 'permission denied'}\n".encode()
        return Captured(code, None, b"", msg, 0, len(msg), False, False, time.monotonic() - started)
    except Exception as exc:  # includes SubprocessError from a failed preexec step
        raise SandboxError(f"could not start the sandboxed command {cmd[0]!r}: {type(exc).__name__}: {exc}",
                           hint="run `palaestra sandbox info` to see what this machine supports") from exc
    transports: list[asyncio.BaseTransport] = []
    limit_hit = asyncio.Event()
    out = _Sink(cap, kill_at, limit_hit.set)
    err = _Sink(cap, kill_at, limit_hit.set)
    waiter = _exit_future(proc, loop)
    pumps: list[asyncio.Future[Any]] = []
    limiter: asyncio.Future[Any] = asyncio.ensure_future(limit_hit.wait())
    timed_out = drain_timed_out = False
    try:
        for sink, pipe in ((out, proc.stdout), (err, proc.stderr)):
            reader, transport = await _reader(loop, pipe)
            transports.append(transport)
            pumps.append(asyncio.ensure_future(sink.pump(reader)))
        if stdin is not None:
            wt, _ = await loop.connect_write_pipe(asyncio.Protocol, proc.stdin)
            transports.append(wt)
            wt.write(stdin)
            wt.close()
        watched: set[asyncio.Future[Any]] = {waiter, limiter}
        done, _ = await asyncio.wait(watched, timeout=max(0.0, timeout),
                                     return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            timed_out = not limit_hit.is_set()
            await kill_tree(proc.pid)
            try:
                await asyncio.wait_for(asyncio.shield(waiter), 10.0)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.wait_for(asyncio.shield(waiter), 5.0)
        elif after_exit is not None:
            await after_exit(proc.pid)
        _, pending = await asyncio.wait(pumps, timeout=DRAIN_S)
        if pending:
            drain_timed_out = True
            await kill_tree(proc.pid)
            await asyncio.wait(pumps, timeout=0.5)
    finally:
        for task in [*pumps, limiter]:
            task.cancel()
        if not waiter.done():
            await kill_tree(proc.pid)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(waiter), 5.0)
        for transport in transports:
            transport.close()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    sig = -rc if rc < 0 else None
    return Captured(
        returncode=128 + sig if sig else rc, signal=sig, stdout=out.data(), stderr=err.data(),
        stdout_total=out.total, stderr_total=err.total, timed_out=timed_out, output_limit=limit_hit.is_set(),
        duration_s=time.monotonic() - started, drain_timed_out=drain_timed_out,
    )


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
