"""A small pool of worker processes for CPU-bound checks that may hang.

math-verify runs sympy, which can spin for minutes (or forever) on adversarial input, and it cannot be
interrupted from a thread. So checks run in child processes, off the event loop, each call under a
deadline; a worker that overruns is killed and replaced, so one bad answer never wedges the server. A
worker that *dies* is an infrastructure failure and surfaces as ``VerifierError``.

Workers are plain ``python -m <module>`` children speaking JSON lines on stdin/stdout, not
``multiprocessing`` children: those re-import the parent's ``__main__`` script on start (a user's
unguarded eval script would run again inside the verifier) and cannot be killed one at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from palaestra.core.errors import VerifierError

# Variables a Python child needs; everything else (API keys above all) stays in the parent.
_ENV_KEEP = ("PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "HOME", "TMPDIR", "LANG", "LC_ALL", "SYSTEMROOT")


class CheckTimeout(Exception):
    """A check ran past its deadline; its worker has been killed and will be replaced."""


class WorkerDied(Exception):
    """The worker's pipe closed: it crashed, or was killed after a timeout."""


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP}
    src = str(Path(__file__).resolve().parents[3])  # the directory holding the `palaestra` package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class _Worker:
    """One child process; used by one call at a time."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env(), text=True, bufsize=1,
            encoding="utf-8",
        )
        self.killed = False
        self.busy = False

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        return self.proc.stdin, self.proc.stdout

    def read(self) -> dict[str, Any]:
        line = self._pipes()[1].readline()
        if not line:
            code = self.proc.wait()
            raise WorkerDied(f"worker exited with code {code}")
        try:
            message: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            raise WorkerDied(f"worker wrote a line that is not JSON: {line[:200]!r}") from None
        return message

    def request(self, fn: str, args: list[Any]) -> dict[str, Any]:
        """Runs in an I/O thread; after a kill, this thread is the one that closes the pipes."""
        stdin, _ = self._pipes()
        self.busy = True
        try:
            stdin.write(json.dumps({"fn": fn, "args": args}) + "\n")
            stdin.flush()
            return self.read()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise WorkerDied(f"worker pipe closed: {exc}") from None
        finally:
            self.busy = False
            if self.killed:
                self._close_pipes()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.killed = True
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            pass
        if not self.busy:  # a thread blocked in read() owns the pipes; it closes them on its way out
            self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except (OSError, ValueError):
                pass


class WorkerPool:
    """Up to ``workers`` children of ``python -m module``, started on first use.

    The worker module must print ``{"ready": true}`` once set up, then answer each request line
    ``{"fn", "args"}`` with ``{"ok": result}`` or ``{"error": message}``.
    """

    def __init__(self, module: str, *, workers: int = 2, startup_timeout: float = 120.0,
                 argv: list[str] | None = None) -> None:
        if workers < 1:
            raise ValueError("WorkerPool needs at least one worker")
        self.argv = argv or [sys.executable, "-m", module]
        self.workers = workers
        self.startup_timeout = startup_timeout
        self._idle: list[_Worker] = []
        self._all: weakref.WeakSet[_Worker] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verifier-io")
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def _slot(self) -> asyncio.Semaphore:
        """One slot per worker (per event loop), so time spent queueing never counts against a deadline."""
        loop = asyncio.get_running_loop()
        sem = self._slots.get(loop)
        if sem is None:
            sem = self._slots[loop] = asyncio.Semaphore(self.workers)
        return sem

    def _spawn_ready(self) -> _Worker:
        worker = _Worker(self.argv)
        self._all.add(worker)
        try:
            hello = worker.read()
        except WorkerDied as exc:
            worker.kill()
            raise VerifierError(
                f"verifier worker {' '.join(self.argv[1:])} failed to start: {exc}",
                hint="run that command by hand to see its error; its dependencies must import",
            ) from None
        if not hello.get("ready"):
            worker.kill()
            raise VerifierError(f"verifier worker sent {hello!r} instead of its ready line")
        return worker

    async def _acquire(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.kill()
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._threads, self._spawn_ready)
        try:
            return await asyncio.wait_for(future, self.startup_timeout)
        except asyncio.TimeoutError:
            raise VerifierError(
                f"verifier worker did not start within {self.startup_timeout:g}s",
                hint="the machine may be overloaded; raise startup_timeout or retry",
            ) from None

    async def run(self, fn: str, *args: Any, timeout: float) -> Any:
        """``fn(*args)`` in a worker: CheckTimeout past ``timeout`` s, VerifierError if the worker dies
        or the check itself raises (a verifier bug is never a wrong answer)."""
        async with self._slot():
            worker = await self._acquire()
            loop = asyncio.get_running_loop()
            try:
                reply = await asyncio.wait_for(
                    loop.run_in_executor(self._threads, worker.request, fn, list(args)), timeout
                )
            except asyncio.TimeoutError:
                worker.kill()  # unblocks the I/O thread too: its read sees end-of-file
                raise CheckTimeout(f"check exceeded {timeout:g}s") from None
            except WorkerDied as exc:
                worker.kill()
                raise VerifierError(
                    f"verifier worker died during {fn}: {exc}",
                    hint="the worker crashed (out of memory or a native fault); retry the rollout",
                ) from None
            except BaseException:
                worker.kill()  # cancelled mid-call: the worker's state is unknown
                raise
            with self._lock:
                self._idle.append(worker)
        if "error" in reply:
            raise VerifierError(
                f"verifier check {fn} raised: {reply['error']}",
                hint="this is a verifier bug; report it with the answer that triggered it",
            )
        return reply.get("ok")

    def shutdown(self) -> None:
        """Stop every worker now; the pool starts new ones on the next call."""
        with self._lock:
            workers = set(self._idle) | set(self._all)
            self._idle.clear()
        for worker in workers:
            worker.kill()

    def pids(self) -> list[int]:
        return [w.proc.pid for w in list(self._all) if w.alive()]
