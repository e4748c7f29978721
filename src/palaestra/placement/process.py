"""The ``local`` placement: environment servers as local processes, started on 127.0.0.1, watched, and
restarted when they die (``SupervisedTransport``).

A crashed environment server fails only the rollouts that were talking to it (``failed(environment)``,
retried by the collector); the supervisor starts a fresh process for the ones that follow."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from typing import Any

import orjson

from palaestra.client.env_client import HttpTransport
from palaestra.client.transport import TransportFailure
from palaestra.core.errors import EnvironmentFailure
from palaestra.server.security import new_token
from palaestra.wire.errors import WireError


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
                            token: str | None = None, options: dict[str, Any] | None = None,
                            max_sessions: int | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``python -m palaestra.server.env_main SPEC`` on 127.0.0.1 and wait for its ready line.

    ``token`` (the supervisor's own) goes to the server on its stdin, never in argv or its environment;
    without one the server generates its own, so a caller that passes none cannot call it.
    Its stderr goes to a temporary log file (a pipe nobody reads would block a chatty server); the log is
    shown if the server fails to start. ``options`` (the environment's constructor arguments, JSON) go
    on the next stdin line, so a judge URL with credentials is never in argv. ``max_sessions``: the
    server's session cap (None: the environment's own)."""
    cmd = [sys.executable, "-m", "palaestra.server.env_main", spec, "--watch-stdin"]
    if max_sessions is not None:
        cmd += ["--max-sessions", str(max_sessions)]
    if token is not None:
        cmd.append("--token-stdin")
    if options:
        cmd.append("--options-stdin")
    child_env = dict(os.environ)
    if env_vars:
        child_env.update(env_vars)
    log_fd = tempfile.TemporaryFile(prefix="palaestra-env-")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_fd, env=child_env,
                            cwd=os.getcwd())
    assert proc.stdout is not None and proc.stdin is not None
    first_lines = (token.encode() + b"\n" if token is not None else b"") + (
        orjson.dumps(options) + b"\n" if options else b"")
    if first_lines:
        try:
            proc.stdin.write(first_lines)
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


class SupervisedTransport:
    """``EnvTransport`` to a local environment process that restarts the process when it dies.

    The call that found the process dead still fails (its session is gone with the process); the
    restart makes the next calls work. Restarts are serialised, and counted in ``restarts``.
    The process asks for ``token`` (fresh per supervisor, kept across restarts); this transport sends it
    (on the child's stdin at start, then as the bearer token of every call)."""

    def __init__(self, spec: str, name: str, *, max_restarts: int = 20,
                 options: dict[str, Any] | None = None, max_sessions: int | None = None) -> None:
        self.spec = spec
        self.options = options
        self.max_sessions = max_sessions
        self.token = new_token()
        self.name = name
        self.max_restarts = max_restarts
        self.restarts = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.where = self.base_url = ""
        self._http: HttpTransport | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        proc, port = await start_env_process(self.spec, token=self.token, options=self.options,
                                             max_sessions=self.max_sessions)
        self.process = proc
        self.where = self.base_url = f"http://127.0.0.1:{port}"
        self._http = HttpTransport(self.base_url, token=self.token)

    async def _restart_if_dead(self, seen: HttpTransport) -> None:
        async with self._lock:
            if self._http is not seen or self.process is None or self.process.poll() is None:
                return  # someone else restarted it already, or it is alive (a slow call, not a crash)
            if self.restarts >= self.max_restarts:
                raise EnvironmentFailure(f"environment server '{self.name}' died {self.restarts + 1} times",
                                         hint="check the environment for a crash bug")
            self.restarts += 1
            _terminate(self.process)
            await self.start()
            await seen.aclose()

    async def request(self, op: str, **args: Any) -> Any:
        http = self._http
        if http is None:
            raise TransportFailure("unreachable", f"environment server '{self.name}' is not running")
        try:
            return await http.request(op, **args)
        except (TransportFailure, WireError):
            await self._restart_if_dead(http)  # a poll(): a live server's error answer is passed on as it is
            raise

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
        if self.process is not None:
            _terminate(self.process)
        self.process = None
