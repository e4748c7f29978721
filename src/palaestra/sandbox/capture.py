"""Run one sandboxed command and collect its output without trusting it.

Three deadlines, all independent: the command's own ``timeout`` (then the provider's tree-killer runs),
a per-stream hard output limit (a program printing forever is stopped, not buffered), and a short drain
deadline after the command ends (a grandchild holding the pipe open cannot hang the runtime)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from palaestra.sandbox.types import SandboxError

DRAIN_S = 2.0


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
    kwargs: dict[str, Any] = {}
    if preexec is not None:
        kwargs["preexec_fn"] = preexec
    try:
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=cwd,
            start_new_session=True, pass_fds=tuple(pass_fds), close_fds=True, **kwargs,
        )
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
    limit_hit = asyncio.Event()
    out = _Sink(cap, kill_at, limit_hit.set)
    err = _Sink(cap, kill_at, limit_hit.set)
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [asyncio.ensure_future(out.pump(proc.stdout)), asyncio.ensure_future(err.pump(proc.stderr))]
    feeder = asyncio.ensure_future(_feed(proc, stdin)) if stdin is not None else None
    waiter = asyncio.ensure_future(proc.wait())
    limiter = asyncio.ensure_future(limit_hit.wait())
    timed_out = drain_timed_out = False
    try:
        done, _ = await asyncio.wait({waiter, limiter}, timeout=max(0.0, timeout),
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
            _, pending = await asyncio.wait(pumps, timeout=0.5)
    finally:
        for task in [*pumps, limiter] + ([feeder] if feeder else []):
            task.cancel()
        if proc.returncode is None:
            await kill_tree(proc.pid)
        for t in (proc.stdout, proc.stderr):
            transport = getattr(t, "_transport", None)
            if transport is not None:
                transport.close()
    rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    sig = -rc if rc < 0 else None
    return Captured(
        returncode=128 + sig if sig else rc, signal=sig, stdout=out.data(), stderr=err.data(),
        stdout_total=out.total, stderr_total=err.total, timed_out=timed_out, output_limit=limit_hit.is_set(),
        duration_s=time.monotonic() - started, drain_timed_out=drain_timed_out,
    )


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
        proc.stdin.write(data)
        await proc.stdin.drain()
    with contextlib.suppress(Exception):
        proc.stdin.close()


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
