"""The container side of the ``docker``/``podman`` provider: one ``DockerSandbox`` per container,
every operation an ``exec`` through the CLI (so a remote or rootless engine works the same), files
moving as ``cat``/``tar`` streams, and each exec wrapped so that nothing it started outlives it."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import posixpath
import signal
import tarfile
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from palaestra.sandbox.base import Sandbox
from palaestra.sandbox.capture import Captured, decode, run_captured
from palaestra.sandbox.cgroups import BoxCgroups
from palaestra.sandbox.oslevel import killpg
from palaestra.sandbox.registry import Registry, engine_cwd
from palaestra.sandbox.types import ExecResult, SandboxError, SandboxSpec, SandboxStatus, as_bytes, merge_env


class DockerProvider(Protocol):
    """What a container needs of its provider (``docker.DockerProvider``). A protocol, not an import: the
    provider module imports this one, and the two must not import each other."""

    @property
    def name(self) -> str: ...
    binary: str
    user: str
    registry: Registry

    @property
    def engine(self) -> list[str]:
        """The CLI and its global flags (podman's runtime and cgroup manager), before each subcommand."""
        ...

    def exec_args(self, container: str, *, user: str, cwd: str | None, env: Mapping[str, str],
                  interactive: bool) -> list[str]:
        """The ``exec`` subcommand up to the container's name (``runsc`` spells its flags differently)."""
        ...

    async def container_state(self, container: str) -> str: ...

    @property
    def host_processes(self) -> bool:
        """Whether the container's processes are host processes in its cgroup (not under gVisor)."""
        ...

    async def remove_container(self, container: str) -> None: ...


def docker_exec_args(container: str, *, user: str, cwd: str | None, env: Mapping[str, str],
                     interactive: bool) -> list[str]:
    args = ["exec"] + (["-i"] if interactive else []) + ["-u", user] + (["-w", cwd] if cwd else [])
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    return [*args, container]

_WRAP = '"$@"; rc=$?; kill -9 -1 2>/dev/null; exit $rc'
_WRAP_KEEP = '"$@"'  # keep_background: what the command left running stays until close
_READ = ('[ -e "$1" ] || [ -L "$1" ] || { echo "$1: No such file or directory" >&2; exit 1; }; '
         '[ "$(readlink -f -- "$1")" = "$1" ] || { echo "a symlink is in the path" >&2; exit 3; }; '
         '[ -f "$1" ] || { echo "not a regular file" >&2; exit 3; }; exec cat -- "$1"')


async def cli(binary: str, *args: str, stdin: bytes | None = None, timeout: float = 60.0,
              cap: int = 1 << 20) -> Captured:
    async def kill(pid: int) -> None:
        killpg(pid)

    return await run_captured([binary, *args], timeout=timeout, cap=cap, kill_at=max(cap, 1 << 26) + 1,
                              kill_tree=kill, stdin=stdin, env=dict(os.environ), cwd=engine_cwd())


def _container_cgroups(full_id: str) -> BoxCgroups:
    base = "/sys/fs/cgroup"
    return BoxCgroups([p for p in (f"{base}/memory/docker/{full_id}", f"{base}/pids/docker/{full_id}",
                                   f"{base}/system.slice/docker-{full_id}.scope", f"{base}/docker/{full_id}",
                                   f"{base}/memory/system.slice/docker-{full_id}.scope",
                                   f"{base}/memory/libpod_parent/libpod-{full_id}",  # podman, cgroupfs manager
                                   f"{base}/pids/libpod_parent/libpod-{full_id}",
                                   f"{base}/libpod_parent/libpod-{full_id}",
                                   f"{base}/memory/palaestra/{full_id}",  # the gvisor provider's cgroupsPath
                                   f"{base}/pids/palaestra/{full_id}") if os.path.isdir(p)])


def _any_dir(paths: Sequence[str]) -> bool:
    return any(os.path.isdir(p) for p in paths)


class DockerSandbox(Sandbox):
    def __init__(self, provider: DockerProvider, spec: SandboxSpec, record: dict[str, Any], full_id: str) -> None:
        self.provider = provider
        self.spec = spec
        self.record = record
        self.id = str(record["id"])
        self.name = str(record["container"])
        self.full_id = full_id
        self.created = float(record["created"])
        self._closed = False
        self._ended = ""  # why the container ended under an exec (gVisor's memory bomb): later execs fail
        self._execs = 0
        self._lock = asyncio.Lock()
        self._cg = _container_cgroups(full_id)
        self._init_pid: int | None = None

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed", hint="create a new sandbox")
        if self._ended:
            raise SandboxError(f"sandbox {self.id} ended: {self._ended}", reason="oom" if "memory" in self._ended
                               else "provider", hint="create a new sandbox (with more memory_mb)")

    async def _raw_exec(self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float = 60.0,
                        cap: int = 1 << 20, user: str | None = None, cwd: str | None = None) -> Captured:
        args = self.provider.exec_args(self.name, user=user or self.provider.user, cwd=cwd, env={},
                                       interactive=stdin is not None)
        return await cli(*self.provider.engine, *args, *argv, stdin=stdin, timeout=timeout, cap=cap)

    async def exec(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        argv = self.checked_argv(argv)
        self._check_open()
        async with self._lock:
            full_env = merge_env({"HOME": self.spec.workdir, "TMPDIR": "/tmp", "PALAESTRA_SANDBOX_ID": self.id},
                                 self.spec.env, env)
            args = self.provider.exec_args(self.name, user=self.provider.user, cwd=self.inner_path(cwd or "."),
                                           env=full_env, interactive=stdin is not None)
            args += ["/bin/sh", "-c", _WRAP_KEEP if self.spec.keep_background else _WRAP, "sh", *argv]
            before = self._cg.counters()

            async def kill_tree(pid: int) -> None:
                await self._kill_all()
                killpg(pid)

            run = asyncio.ensure_future(run_captured(
                [*self.provider.engine, *args], timeout=timeout, cap=self.spec.output_cap_bytes,
                kill_at=self.spec.output_kill_bytes, kill_tree=kill_tree, stdin=stdin, env=dict(os.environ),
                cwd=engine_cwd()))
            self._execs += 1
            if await self._container_ended(run):
                return await self._ended_result()
            cap = await run
            if cap.returncode in (125, 126, 127) and not cap.timed_out and b"Error" in cap.stderr[:400]:
                state = await self._state()
                if state != "running":
                    raise SandboxError(f"container {self.name} is {state}: {decode(cap.stderr).strip()[:300]}")
            after = self._cg.counters()
            failure: Any = None
            detail = ""
            if cap.timed_out:
                failure, detail = "timeout", f"killed after {timeout:g} s"
            elif cap.output_limit:
                failure, detail = "limit", f"output over {self.spec.output_kill_bytes} bytes"
            elif cap.returncode != 0 and (after["oom"] > before["oom"] or (
                    cap.returncode == 137 and not self._cg.paths and self.spec.memory_mb)):
                failure, detail = "oom", f"memory limit {self.spec.memory_mb} MB"
            elif cap.returncode != 0 and after["pids"] > before["pids"]:
                failure, detail = "limit", f"process limit {self.spec.pids}"
            elif await self._ended_under(cap):
                return await self._ended_result()
            if failure == "oom" and not self.provider.host_processes and await self._state() != "running":
                self._ended = f"out of memory (memory limit {self.spec.memory_mb} MB): gVisor stopped the sandbox"
            return ExecResult(exit_code=cap.returncode, stdout=decode(cap.stdout), stderr=decode(cap.stderr),
                              stdout_truncated=cap.stdout_total > len(cap.stdout),
                              stderr_truncated=cap.stderr_total > len(cap.stderr), duration_s=cap.duration_s,
                              failure=failure, detail=detail, signal=cap.signal)

    async def _container_ended(self, run: asyncio.Future[Captured]) -> bool:
        """Under gVisor a memory bomb ends the whole sandbox, and docker's ``exec`` client then waits for its
        timeout ("WaitPID failed: EOF"). The container's cgroup vanishing says so at once (a stat every
        0.25 s, no process): the exec client is stopped and True returned. Host-process containers never
        need this (their exec returns when the container dies)."""
        paths = list(self._cg.paths)
        if not paths or self.provider.host_processes:
            return False

        async def gone() -> None:
            while _any_dir(paths):
                await asyncio.sleep(0.25)

        watcher = asyncio.ensure_future(gone())
        watched: set[asyncio.Future[Any]] = {run, watcher}
        done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        if run in done:
            watcher.cancel()
            return False
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError, SandboxError):
            await run
        return True

    async def _ended_under(self, cap: Captured, settle_s: float = 15.0) -> bool:
        """Whether the container ended under an exec whose client did return. Under gVisor a memory bomb ends
        the whole sandbox, and the exec client can come back (podman: exit 128, "WaitPID failed: EOF") just
        before the container's cgroup goes, so ``_container_ended`` misses it and the bomb would read as a
        program's own exit code. A failed exec under gVisor therefore asks the engine for the container's
        state; when the runtime says it lost the sandbox, the state is polled until it settles (the engine
        notices the dead sandbox a moment after the client does)."""
        if self.provider.host_processes or cap.returncode == 0:
            return False
        lost = any(sign in cap.stderr for sign in (b"WaitPID", b"urpc method", b"connection reset"))
        deadline = time.monotonic() + (settle_s if lost else 0.0)
        while True:
            if await self._state() != "running":
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.25)

    async def _ended_result(self) -> ExecResult:
        """The exec's result when the container ended under it: ``oom`` when the engine says the memory
        limit killed it (docker's ``OOMKilled``; 137 under a memory limit), else a ``SandboxError``."""
        cap = await cli(*self.provider.engine, "inspect", "-f", "{{.State.OOMKilled}} {{.State.ExitCode}}",
                        self.name, timeout=15)
        oom, _, code = decode(cap.stdout).strip().partition(" ")
        if oom == "true" or (code == "137" and self.spec.memory_mb):
            self._ended = f"out of memory (memory limit {self.spec.memory_mb} MB): gVisor stopped the sandbox"
            return ExecResult(exit_code=137, stderr="the sandbox ran out of memory and was stopped\n",
                              failure="oom", detail=f"memory limit {self.spec.memory_mb} MB; the sandbox ended",
                              signal=9)
        self._ended = f"the container exited ({code or 'state unknown'}) during an exec"
        raise SandboxError(f"sandbox {self.id}: {self._ended}", hint="see the engine's logs for the container")

    async def _kill_all(self) -> None:
        """Kill everything but the container's init. From the host first, through the container's cgroup,
        where its processes are host processes: an exec needs a free slot in the pids cgroup, which a fork
        bomb never leaves. Under gVisor the cgroup holds gVisor itself, so only the exec-side kill runs."""
        if self._cg.paths and self.provider.host_processes:
            if self._init_pid is None:
                cap = await cli(*self.provider.engine, "inspect", "-f", "{{.State.Pid}}", self.name, timeout=15)
                text = decode(cap.stdout).strip()
                self._init_pid = int(text) if text.isdigit() else 0
            if self._init_pid:
                await asyncio.to_thread(self._kill_from_host, self._init_pid)
        await self._raw_exec(["/bin/sh", "-c", "kill -9 -1 2>/dev/null; exit 0"], timeout=15)

    def _kill_from_host(self, init_pid: int, rounds: int = 400) -> None:
        for _ in range(rounds):
            left = self._cg.pids() - {init_pid}
            if not left:
                return
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    async def _state(self) -> str:
        return await self.provider.container_state(self.name)

    async def upload(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        self._check_open()
        inner = self.inner_path(path)
        script = 'mkdir -p -- "$(dirname -- "$1")" && rm -f -- "$1" && cat > "$1" && chmod "$2" -- "$1"'
        cap = await self._raw_exec(["/bin/sh", "-c", script, "sh", inner, f"{mode:o}"], stdin=as_bytes(data))
        if cap.returncode != 0:
            raise ValueError(f"cannot write '{path}' in the sandbox: {decode(cap.stderr).strip()[:300]}")

    async def download(self, path: str, *, max_bytes: int = 64 << 20) -> bytes:
        self._check_open()
        # the contract: a symlink (anywhere in the path) or a special file is refused, never followed
        cap = await self._raw_exec(["/bin/sh", "-c", _READ, "sh", self.inner_path(path)], cap=max_bytes + 1)
        if cap.returncode != 0:
            raise ValueError(f"cannot read '{path}' in the sandbox: {decode(cap.stderr).strip()[:300]}")
        if cap.stdout_total > max_bytes:
            raise ValueError(f"'{path}' is over the {max_bytes}-byte limit")
        return cap.stdout

    async def download_tar(self, path: str = ".", *, max_bytes: int = 64 << 20, max_files: int = 10_000) -> bytes:
        self._check_open()
        cap = await self._raw_exec(["tar", "-C", self.inner_path(path), "-cf", "-", "."], cap=2 * max_bytes + (1 << 20))
        if cap.returncode != 0:
            raise ValueError(f"cannot archive '{path}' in the sandbox: {decode(cap.stderr).strip()[:300]}")
        if cap.stdout_total > 2 * max_bytes:
            raise ValueError(f"'{path}' holds more than {max_bytes} bytes")
        return cap.stdout

    async def upload_tar(self, data: bytes, path: str = ".") -> None:
        self._check_open()
        inner = self.inner_path(path)
        cap = await self._raw_exec(["/bin/sh", "-c", 'mkdir -p -- "$1" && tar -C "$1" -xf -', "sh", inner], stdin=data)
        if cap.returncode != 0:
            raise ValueError(f"cannot unpack into '{path}' in the sandbox: {decode(cap.stderr).strip()[:300]}")

    async def download_dir(self, path: str = ".", *, max_bytes: int = 64 << 20,
                           max_files: int = 10_000) -> dict[str, bytes]:
        data = await self.download_tar(path, max_bytes=max_bytes, max_files=max_files)
        out: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar:
                if member.isfile():
                    fh = tar.extractfile(member)
                    if fh is not None:
                        out[member.name.removeprefix("./")] = fh.read()
                if len(out) > max_files or sum(map(len, out.values())) > max_bytes:
                    raise ValueError(f"'{path}' holds more than {max_files} files or {max_bytes} bytes")
        return out

    async def status(self) -> SandboxStatus:
        now = time.time()
        state = "closed" if self._closed else await self._state()
        return SandboxStatus(id=self.id, provider=self.provider.name, state=state, created=self.created,
                             age_s=now - self.created, execs=self._execs, labels=dict(self.spec.labels),
                             detail=self.name)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.provider.remove_container(self.name)
        self.provider.registry.remove(self.id)


async def seed_files(box: DockerSandbox, files: Mapping[str, bytes | str]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, data in files.items():
            payload = as_bytes(data)
            info = tarfile.TarInfo(posixpath.relpath(box.inner_path(rel), box.spec.workdir))
            info.size, info.mode, info.mtime = len(payload), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(payload))
    cap = await box._raw_exec(["tar", "-C", box.spec.workdir, "-xf", "-"], stdin=buf.getvalue())
    if cap.returncode != 0:
        raise SandboxError(f"seeding files into {box.name} failed: {decode(cap.stderr).strip()[:300]}",
                           hint="the image needs tar")
