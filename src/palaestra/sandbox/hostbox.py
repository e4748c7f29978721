"""What the ``local``, ``process``, ``none`` and ``apptainer`` providers share: a box is a host directory
(``work/`` is the working directory, ``tmp/`` is ``/tmp``; a size-limited tmpfs when we may mount), a
dedicated uid when the runtime is root, and cgroups where writable. Each exec is a fresh process tree
that the provider wraps (bubblewrap, Landlock+seccomp, apptainer); nothing outlives an exec.

Everything a box holds is written into its registry record before it exists, and ``destroy`` undoes a
record step by step, so ``close()`` and the reaper of a later run are the same code."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import tarfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

from palaestra.sandbox import fsops, fstar
from palaestra.sandbox.base import Sandbox
from palaestra.sandbox.capture import Captured, decode, run_captured
from palaestra.sandbox.cgroups import BoxCgroups
from palaestra.sandbox.oslevel import ChildSetup, base_rlimits, kill_uid, killpg, umount
from palaestra.sandbox.registry import Registry
from palaestra.sandbox.types import ExecResult, FailureType, SandboxError, SandboxSpec, SandboxStatus, merge_env

Command = tuple[list[str], list[int], "dict[str, str] | None"]
"""(command line, fds to pass to it, the environment to spawn it with; None: the command carries it)."""

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


def destroy(record: dict[str, Any], registry: Registry) -> None:
    """Kill, unmount and delete everything a record names, then drop the record (safe to repeat)."""
    cgroups = BoxCgroups(list(record.get("cgroups") or []))
    emptied = cgroups.kill() and bool(cgroups.paths)
    uid = record.get("uid")
    if isinstance(uid, int) and not emptied:
        kill_uid(uid)
    elif record.get("provider") != "local":
        kill_marked(str(record["id"]))
    box_dir = record.get("box_dir")
    if box_dir and str(box_dir).startswith(str(registry.boxes_dir) + "/"):
        if record.get("mount"):
            umount(str(box_dir))
        _rmtree(str(box_dir))
    cgroups.remove()
    if isinstance(uid, int):
        registry.release_uid(uid)
    registry.remove(str(record["id"]))


def kill_marked(box_id: str) -> None:
    """Without a uid or a cgroup to go by, find leftovers by the box id in their environment (a best
    effort: a hostile program can rewrite its environment; cgroups or a dedicated uid cannot be evaded)."""
    marker = f"PALAESTRA_SANDBOX_ID={box_id}".encode()
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if marker in fh.read().split(b"\0"):
                    os.kill(int(name), signal.SIGKILL)
        except OSError:
            continue


def _rmtree(path: str) -> None:
    def fix(func: Any, p: str, exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            os.chmod(p, stat.S_IRWXU)
        with contextlib.suppress(OSError):
            func(p)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=fix)


class HostSandbox(Sandbox):
    """A box in a host directory. Subclasses build the command line (``_command``) and say whether a
    pid namespace already kills leftovers at the end of each exec (``pid_namespace``)."""

    pid_namespace = False

    def __init__(self, provider: Any, spec: SandboxSpec, record: dict[str, Any]) -> None:
        self.provider = provider
        self.registry: Registry = provider.registry
        self.spec = spec
        self.record = record
        self.id = str(record["id"])
        self.box_dir = str(record["box_dir"])
        self.work_dir = os.path.join(self.box_dir, "work")
        self.tmp_dir = os.path.join(self.box_dir, "tmp")
        self.uid: int | None = record.get("uid")
        self.cgroups = BoxCgroups(list(record.get("cgroups") or []))
        self.created = float(record["created"])
        self.expires_at: float | None = record.get("expires_at")
        self._lock = asyncio.Lock()
        self._closed = False
        self._execs = 0

    # ---- paths -----------------------------------------------------------------------------------
    def host_location(self, path: str) -> tuple[str, str]:
        """(host root, relative path) of a sandbox path under ``workdir`` or ``/tmp``."""
        inner = self.inner_path(path)
        for prefix, root in ((self.spec.workdir, self.work_dir), ("/tmp", self.tmp_dir)):
            if inner == prefix or inner.startswith(prefix.rstrip("/") + "/"):
                return root, inner[len(prefix):].lstrip("/")
        raise ValueError(f"'{path}' is outside the sandbox's writable area ({self.spec.workdir} and /tmp)")

    @property
    def owner(self) -> tuple[int, int] | None:
        return (self.uid, self.uid) if self.uid is not None else None

    # ---- files ---------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed", hint="create a new sandbox")
        if self.expires_at is not None and time.time() > self.expires_at:
            raise SandboxError(f"sandbox {self.id} passed its lifetime of {self.spec.lifetime_s:g} s",
                               hint="raise SandboxSpec.lifetime_s", reason="limit")

    async def upload(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        self._check_open()
        root, rel = self.host_location(path)
        payload = data.encode() if isinstance(data, str) else bytes(data)
        try:
            await asyncio.to_thread(fsops.write_file, root, rel, payload, mode=mode, owner=self.owner)
        except OSError as exc:
            raise ValueError(f"cannot write '{path}' in the sandbox: {exc.strerror or exc}") from None

    async def download(self, path: str, *, max_bytes: int = 64 << 20) -> bytes:
        self._check_open()
        root, rel = self.host_location(path)
        try:
            return await asyncio.to_thread(fsops.read_file, root, rel, max_bytes=max_bytes)
        except OSError as exc:
            raise ValueError(f"cannot read '{path}' in the sandbox: {exc.strerror or exc}") from None

    async def download_dir(self, path: str = ".", *, max_bytes: int = 64 << 20,
                           max_files: int = 10_000) -> dict[str, bytes]:
        self._check_open()
        root, rel = self.host_location(path)
        try:
            return await asyncio.to_thread(fsops.walk_files, root, rel, max_bytes=max_bytes, max_files=max_files)
        except OSError as exc:
            raise ValueError(f"cannot list '{path}' in the sandbox: {exc.strerror or exc}") from None

    async def download_tar(self, path: str = ".", *, max_bytes: int = 64 << 20, max_files: int = 10_000) -> bytes:
        self._check_open()
        root, rel = self.host_location(path)
        try:
            return await asyncio.to_thread(fstar.tar_tree, root, rel, max_bytes=max_bytes, max_files=max_files)
        except OSError as exc:
            raise ValueError(f"cannot archive '{path}' in the sandbox: {exc.strerror or exc}") from None

    async def upload_tar(self, data: bytes, path: str = ".") -> None:
        self._check_open()
        root, rel = self.host_location(path)
        try:
            await asyncio.to_thread(fstar.untar_into, root, rel, data, owner=self.owner)
        except (OSError, tarfile.TarError) as exc:
            raise ValueError(f"cannot unpack into '{path}' in the sandbox: {exc}") from None

    # ---- exec ----------------------------------------------------------------------------------
    def base_env(self) -> dict[str, str]:
        return {"PATH": DEFAULT_PATH, "HOME": self.resolve(self.spec.workdir), "TMPDIR": self.resolve("/tmp"),
                "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "USER": "sandbox", "LOGNAME": "sandbox",
                "PALAESTRA_SANDBOX_ID": self.id}

    def _command(self, argv: Sequence[str], cwd: str, env: dict[str, str]) -> Command:
        """(command line, fds to pass, spawn environment or None when ``env`` goes in the command)."""
        raise NotImplementedError

    def child_setup(self) -> ChildSetup:
        spec = self.spec
        mem_cg = self.cgroups.has("memory")
        nproc = (spec.pids + 8) if (spec.pids and self.uid is not None) else None
        rl = base_rlimits(open_files=spec.open_files, cpu_time_s=spec.cpu_time_s, file_mb=spec.disk_mb,
                          address_mb=None if mem_cg or not spec.memory_mb else spec.memory_mb + 64, nproc=nproc)
        return ChildSetup(cgroup_procs=self.cgroups.procs_files(), rlimits=rl, uid=self.uid,
                          parent_pid=os.getpid())

    async def kill_tree(self, pid: int) -> None:
        killpg(pid)
        await asyncio.to_thread(self._kill_all)

    def _kill_all(self) -> None:
        # Every process of the box was started inside its cgroups and, under a dedicated uid, cannot leave
        # them (the files are root's): an emptied cgroup proves the tree is gone. The uid sweep (or the
        # environment marker, without a uid) covers machines without cgroups and delegated ones.
        if self.cgroups.paths and self.cgroups.kill() and self.uid is not None:
            return
        if self.uid is not None:
            kill_uid(self.uid)
        elif not self.pid_namespace:
            kill_marked(self.id)

    async def _after_exit(self, pid: int) -> None:
        killpg(pid)
        await asyncio.to_thread(self._kill_all)

    async def exec(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        argv = self.checked_argv(argv)
        self._check_open()
        async with self._lock:
            self._check_open()
            inner_cwd = self.inner_path(cwd) if cwd else self.spec.workdir
            full_env = merge_env(self.base_env(), self.spec.env, env)
            cmd, fds, spawn_env = self._command(argv, inner_cwd, full_env)
            before = self.cgroups.counters()
            cap: Captured | None = None
            try:
                cap = await run_captured(
                    cmd, timeout=timeout, cap=self.spec.output_cap_bytes, kill_at=self.spec.output_kill_bytes,
                    kill_tree=self.kill_tree, stdin=stdin, env=spawn_env, cwd=self.spawn_cwd(inner_cwd),
                    preexec=self.child_setup(), pass_fds=fds, direct=self.direct,
                    after_exit=None if self.pid_namespace else self._after_exit)
            finally:
                self.release_fds(fds)
                if cap is None:
                    self.check_wrapper(None)  # release what the wrapper holds
            self._execs += 1
            self.check_wrapper(cap)
            return self.classify(cap, before, timeout)

    direct = False

    def spawn_cwd(self, inner_cwd: str) -> str | None:
        return None

    def release_fds(self, fds: list[int]) -> None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def check_wrapper(self, cap: Captured | None) -> None:
        """Raise SandboxError when the wrapper (not the program) failed; ``None``: the exec never ran."""

    def classify(self, cap: Captured, before: dict[str, int], timeout: float) -> ExecResult:
        after = self.cgroups.counters()
        sig = cap.signal if cap.signal is not None else (cap.returncode - 128 if cap.returncode > 128 else None)
        failure: FailureType | None = None
        detail = ""
        stderr = decode(cap.stderr)
        if cap.timed_out:
            failure, detail = "timeout", f"killed after {timeout:g} s"
        elif cap.output_limit:
            failure, detail = "limit", f"output over {self.spec.output_kill_bytes} bytes"
        elif cap.returncode != 0 and (after["oom"] > before["oom"] or (
                self.spec.memory_mb and "MemoryError" in stderr[-2000:])):
            failure, detail = "oom", f"memory limit {self.spec.memory_mb} MB"
        elif cap.returncode != 0 and after["pids"] > before["pids"]:
            failure, detail = "limit", f"process limit {self.spec.pids}"
        elif sig == signal.SIGXCPU:
            failure, detail = "limit", f"CPU time limit {self.spec.cpu_time_s} s"
        elif sig == signal.SIGXFSZ:
            failure, detail = "limit", f"file size limit {self.spec.disk_mb} MB"
        elif cap.drain_timed_out:
            detail = "a background process kept the output open; it was killed"
        return ExecResult(
            exit_code=cap.returncode, stdout=decode(cap.stdout), stderr=stderr,
            stdout_truncated=cap.stdout_total > len(cap.stdout), stderr_truncated=cap.stderr_total > len(cap.stderr),
            duration_s=cap.duration_s, failure=failure, detail=detail, signal=sig,
        )

    # ---- lifecycle ---------------------------------------------------------------------------------
    async def status(self) -> SandboxStatus:
        now = time.time()
        if self._closed:
            state = "closed"
        elif self.expires_at is not None and now > self.expires_at:
            state = "expired"
        elif not await asyncio.to_thread(os.path.isdir, self.work_dir):
            state = "lost"
        else:
            state = "running"
        return SandboxStatus(id=self.id, provider=self.provider_name, state=state, created=self.created,
                             age_s=now - self.created, execs=self._execs, uid=self.uid,
                             labels=dict(self.spec.labels))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.provider.forget(self.id)
        await asyncio.to_thread(destroy, self.record, self.registry)
