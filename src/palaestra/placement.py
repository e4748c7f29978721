"""Where an environment runs: in-process (ASGI app called directly, no socket), ``direct`` (the host
object itself, for the lowest overhead), or a local process (uvicorn on 127.0.0.1, started and stopped
here). Callers get an ``EnvClient`` and never know which."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from palaestra.client.env_client import EnvClient, HttpEnvClient
from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError, EnvironmentFailure
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.envs.registry import load_env, spec_for
from palaestra.server.env_app import create_env_app
from palaestra.server.sessions import EnvironmentHost
from palaestra.wire.env import SessionHandle, ToolResult

Placement = Literal["inprocess", "direct", "local"]
PLACEMENTS: tuple[str, ...] = ("inprocess", "direct", "local")


class DirectEnvClient:
    """Calls an in-process ``EnvironmentHost`` without HTTP: the same session logic, no serialization."""

    def __init__(self, host: EnvironmentHost) -> None:
        self.host = host
        self.name = host.env.name

    async def info(self) -> dict[str, Any]:
        return self.host.env.info()

    async def open(self, task: Task) -> SessionHandle:
        return SessionHandle.from_dict(await self.host.open(task))

    async def call_tool(self, session_id: str, name: str, arguments: Any) -> ToolResult:
        from palaestra.core.errors import PalaestraError, UnknownSession

        if isinstance(arguments, str):
            import orjson

            try:
                arguments = orjson.loads(arguments) if arguments.strip() else {}
            except orjson.JSONDecodeError as exc:
                return ToolResult(error={"kind": "bad_arguments",
                                         "message": f"arguments for tool '{name}' are not valid JSON ({exc})"})
        try:
            return await self.host.call_tool(session_id, name, arguments)
        except UnknownSession as exc:
            raise EnvironmentFailure(exc.message, hint=exc.hint) from exc
        except PalaestraError as exc:
            return ToolResult(error=exc.to_dict())

    async def verify(self, session_id: str, trajectory: Trajectory) -> Verdict:
        return await self.host.verify(session_id, trajectory)

    async def verify_stateless(self, task: Task, trajectory: Trajectory) -> Verdict:
        return await self.host.verify_stateless(task, trajectory)

    async def reference(self, task: Task) -> Reference | None:
        return self.host.env.reference(task)

    async def close(self, session_id: str) -> None:
        await self.host.close(session_id)

    async def aclose(self) -> None:
        await self.host.close_all()


@dataclass
class MountedEnv:
    """A running environment and the means to stop it."""

    name: str
    spec: str
    placement: str
    client: EnvClient
    env_class: type[Environment]
    process: subprocess.Popen[bytes] | None = None
    base_url: str | None = None
    startup_s: float = 0.0
    _extra: dict[str, Any] = field(default_factory=dict)

    async def stop(self) -> None:
        await self.client.aclose()
        if self.process is not None:
            _terminate(self.process)
            self.process = None


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
                            ) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``python -m palaestra.server.env_main SPEC`` on 127.0.0.1 and wait for its ready line.

    Its stderr goes to a temporary log file (a pipe nobody reads would block a chatty server); the log is
    shown if the server fails to start."""
    cmd = [sys.executable, "-m", "palaestra.server.env_main", spec, "--watch-stdin"]
    child_env = dict(os.environ)
    if env_vars:
        child_env.update(env_vars)
    log_fd = tempfile.TemporaryFile(prefix="palaestra-env-")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_fd, env=child_env,
                            cwd=os.getcwd())
    assert proc.stdout is not None
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


async def mount_env(spec: str | Environment, placement: str = "inprocess") -> MountedEnv:
    """Mount an environment in the given placement and return a client for it."""
    t0 = time.perf_counter()
    if placement not in PLACEMENTS:
        raise ConfigError(f"unknown placement '{placement}'", hint=f"use one of {', '.join(PLACEMENTS)}")
    env = spec if isinstance(spec, Environment) else None
    spec_str = spec if isinstance(spec, str) else f"{type(spec).__module__}:{type(spec).__qualname__}"
    if placement == "local":
        if env is not None:
            raise ConfigError("a local-process placement needs an importable spec, not an instance")
        from palaestra.envs.registry import load_env_class

        cls = load_env_class(spec_str)
        proc, port = await start_env_process(spec_for(spec_str))
        base = f"http://127.0.0.1:{port}"
        client: EnvClient = HttpEnvClient(base, name=cls.name)
        return MountedEnv(cls.name, spec_str, placement, client, cls, proc, base, time.perf_counter() - t0)
    env = env or load_env(spec_str)
    host = EnvironmentHost(env)
    if placement == "direct":
        client = DirectEnvClient(host)
    else:
        app = create_env_app(host)
        client = HttpEnvClient(name=env.name, app=app)
    return MountedEnv(env.name, spec_str, placement, client, type(env), None, None, time.perf_counter() - t0)
