"""Environment servers as local processes: started on 127.0.0.1, watched, restarted when they die.

A crashed environment server fails only the rollouts that were talking to it (``failed(environment)``,
retried by the collector); the supervisor starts a fresh process for the ones that follow."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from palaestra.client.env_client import HttpEnvClient
from palaestra.core.errors import EnvironmentFailure
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.server.security import new_token
from palaestra.wire.env import SessionHandle, ToolResult

T = TypeVar("T")


def _terminate(proc: subprocess.Popen[bytes], grace_s: float = 3.0) -> None:
    """Stop an environment server: close its stdin (it exits on EOF), then SIGTERM, then SIGKILL."""
    if proc.poll() is None:
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


async def start_env_process(spec: str, *, ready_timeout_s: float = 30.0, env_vars: dict[str, str] | None = None,
                            token: str | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``python -m palaestra.server.env_main SPEC`` on 127.0.0.1 and wait for its ready line.

    ``token`` (the supervisor's own) goes to the server on its stdin, never in argv or its environment;
    without one the server generates its own, so a caller that passes none cannot call it.
    Its stderr goes to a temporary log file (a pipe nobody reads would block a chatty server); the log is
    shown if the server fails to start."""
    cmd = [sys.executable, "-m", "palaestra.server.env_main", spec, "--watch-stdin"]
    if token is not None:
        cmd.append("--token-stdin")
    child_env = dict(os.environ)
    if env_vars:
        child_env.update(env_vars)
    log_fd = tempfile.TemporaryFile(prefix="palaestra-env-")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_fd, env=child_env,
                            cwd=os.getcwd())
    assert proc.stdout is not None and proc.stdin is not None
    if token is not None:
        try:
            proc.stdin.write(token.encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            pass  # it died at once: the ready line below reports why
    loop = asyncio.get_running_loop()

    def failure(reason: str) -> EnvironmentFailure:
        _terminate(proc)
        log_fd.seek(0)
        err = log_fd.read().decode(errors="replace")[-2000:].strip()
        log_fd.close()
        return EnvironmentFailure(f"environment server for '{spec}' {reason}: {err or '(no output)'}",
                                  hint="run `palaestra env serve SPEC` to see the full error")

    try:
        line = await asyncio.wait_for(loop.run_in_executor(None, proc.stdout.readline), ready_timeout_s)
    except asyncio.TimeoutError:
        raise failure(f"not ready after {ready_timeout_s:.0f} s") from None
    text = line.decode(errors="replace").strip()
    if not text.startswith("PALAESTRA_READY "):
        raise failure("failed to start")
    log_fd.close()  # the child keeps its own descriptor; the file vanishes when both are closed
    return proc, int(text.split()[1])



class SupervisedEnvClient:
    """An ``EnvClient`` over a local environment process that restarts the process when it dies.

    The call that found the process dead still fails (its session is gone with the process); the
    restart makes the next calls work. Restarts are serialised, and counted in ``restarts``.
    The process asks for ``token`` (fresh per supervisor, kept across restarts); this client sends it."""

    def __init__(self, spec: str, name: str, *, max_restarts: int = 20) -> None:
        self.spec = spec
        self.token = new_token()
        self.name = name
        self.max_restarts = max_restarts
        self.restarts = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self._client: HttpEnvClient | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        proc, port = await start_env_process(self.spec, token=self.token)
        self.process = proc
        self.base_url = f"http://127.0.0.1:{port}"
        self._client = HttpEnvClient(self.base_url, name=self.name, token=self.token)

    async def _restart_if_dead(self, seen: HttpEnvClient) -> None:
        async with self._lock:
            if self._client is not seen or self.process is None or self.process.poll() is None:
                return  # someone else restarted it already, or it is alive (a slow call, not a crash)
            if self.restarts >= self.max_restarts:
                raise EnvironmentFailure(f"environment server '{self.name}' died {self.restarts + 1} times",
                                         hint="check the environment for a crash bug")
            self.restarts += 1
            old = self._client
            _terminate(self.process)
            await self.start()
            await old.aclose()

    async def _call(self, fn: Callable[[HttpEnvClient], Awaitable[T]]) -> T:
        client = self._client
        if client is None:
            raise EnvironmentFailure(f"environment server '{self.name}' is not running")
        try:
            return await fn(client)
        except EnvironmentFailure:
            await self._restart_if_dead(client)
            raise

    async def info(self) -> dict[str, Any]:
        return await self._call(lambda c: c.info())

    async def open(self, task: Task) -> SessionHandle:
        return await self._call(lambda c: c.open(task))

    async def call_tool(self, session_id: str, name: str, arguments: Any) -> ToolResult:
        return await self._call(lambda c: c.call_tool(session_id, name, arguments))

    async def verify(self, session_id: str, trajectory: Trajectory) -> Verdict:
        return await self._call(lambda c: c.verify(session_id, trajectory))

    async def verify_stateless(self, task: Task, trajectory: Trajectory) -> Verdict:
        return await self._call(lambda c: c.verify_stateless(task, trajectory))

    async def reference(self, task: Task) -> Reference | None:
        return await self._call(lambda c: c.reference(task))

    async def close(self, session_id: str) -> None:
        await self._call(lambda c: c.close(session_id))

    async def health(self) -> dict[str, Any]:
        return await self._call(lambda c: c.health())

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self.process is not None:
            _terminate(self.process)
        self.process = None
