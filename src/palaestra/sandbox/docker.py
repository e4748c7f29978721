"""``docker`` (and ``podman``, the same CLI): one container per sandbox, driven through the CLI by
container name, so a crash between ``run`` and the record update still leaves a name the reaper knows.

Containers run with ``--network none``, no capabilities, ``no-new-privileges``, a read-only root with
size-limited tmpfs for ``workdir`` and ``/tmp``, memory/pids/CPU limits, as an unprivileged user
(``$PALAESTRA_DOCKER_USER``, default ``65534:65534``), labelled with the sandbox id, owner and the
spec's labels. Each exec is wrapped so that everything it started dies with it (``kill -9 -1`` as the
sandbox user, which spares the container's pid 1); on timeout the same kill runs from a second exec.
Files move through ``exec`` (``cat``/``tar``), so the image needs ``sh``, ``cat`` and ``tar``; nothing is
pulled unless ``$PALAESTRA_DOCKER_PULL`` says so (``missing`` by default for the engine's own rules).
"""

from __future__ import annotations

import asyncio
import io
import os
import posixpath
import shutil
import socket
import subprocess
import tarfile
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from palaestra.sandbox.base import Sandbox, SandboxProvider
from palaestra.sandbox.capture import Captured, decode, run_captured
from palaestra.sandbox.cgroups import BoxCgroups
from palaestra.sandbox.oslevel import killpg
from palaestra.sandbox.registry import Registry, is_own, new_box_id, owner_alive, owner_fields
from palaestra.sandbox.types import ExecResult, SandboxError, SandboxSpec, SandboxStatus, as_bytes, merge_env

_WRAP = '"$@"; rc=$?; kill -9 -1 2>/dev/null; exit $rc'


async def cli(binary: str, *args: str, stdin: bytes | None = None, timeout: float = 60.0,
              cap: int = 1 << 20) -> Captured:
    async def kill(pid: int) -> None:
        killpg(pid)

    return await run_captured([binary, *args], timeout=timeout, cap=cap, kill_at=max(cap, 1 << 26) + 1,
                              kill_tree=kill, stdin=stdin, env=dict(os.environ))


def _container_cgroups(full_id: str) -> BoxCgroups:
    base = "/sys/fs/cgroup"
    return BoxCgroups([p for p in (f"{base}/memory/docker/{full_id}", f"{base}/pids/docker/{full_id}",
                                   f"{base}/system.slice/docker-{full_id}.scope", f"{base}/docker/{full_id}",
                                   f"{base}/memory/system.slice/docker-{full_id}.scope") if os.path.isdir(p)])


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
        self._execs = 0
        self._lock = asyncio.Lock()
        self._cg = _container_cgroups(full_id)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError(f"sandbox {self.id} is closed", hint="create a new sandbox")

    async def _raw_exec(self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float = 60.0,
                        cap: int = 1 << 20, user: str | None = None, cwd: str | None = None) -> Captured:
        args = ["exec"] + (["-i"] if stdin is not None else []) + ["-u", user or self.provider.user]
        if cwd:
            args += ["-w", cwd]
        return await cli(self.provider.binary, *args, self.name, *argv, stdin=stdin, timeout=timeout, cap=cap)

    async def exec(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
                   env: Mapping[str, str] | None = None, cwd: str | None = None) -> ExecResult:
        argv = [str(a) for a in argv]
        if not argv or any("\0" in a for a in argv):
            raise ValueError("argv must be a non-empty list of strings without NUL bytes")
        self._check_open()
        async with self._lock:
            full_env = merge_env({"HOME": self.spec.workdir, "TMPDIR": "/tmp", "PALAESTRA_SANDBOX_ID": self.id},
                                 self.spec.env, env)
            args = ["exec"] + (["-i"] if stdin is not None else []) + ["-u", self.provider.user,
                                                                       "-w", self.inner_path(cwd or ".")]
            for key, value in full_env.items():
                args += ["-e", f"{key}={value}"]
            args += [self.name, "/bin/sh", "-c", _WRAP, "sh", *argv]
            before = self._cg.counters()

            async def kill_tree(pid: int) -> None:
                await self._kill_all()
                killpg(pid)

            cap = await run_captured([self.provider.binary, *args], timeout=timeout, cap=self.spec.output_cap_bytes,
                                     kill_at=self.spec.output_kill_bytes, kill_tree=kill_tree, stdin=stdin,
                                     env=dict(os.environ))
            self._execs += 1
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
            return ExecResult(exit_code=cap.returncode, stdout=decode(cap.stdout), stderr=decode(cap.stderr),
                              stdout_truncated=cap.stdout_total > len(cap.stdout),
                              stderr_truncated=cap.stderr_total > len(cap.stderr), duration_s=cap.duration_s,
                              failure=failure, detail=detail, signal=cap.signal)

    async def _kill_all(self) -> None:
        await self._raw_exec(["/bin/sh", "-c", "kill -9 -1 2>/dev/null; exit 0"], timeout=15)

    async def _state(self) -> str:
        cap = await cli(self.provider.binary, "inspect", "-f", "{{.State.Status}}", self.name, timeout=15)
        return decode(cap.stdout).strip() or "missing"

    async def upload(self, path: str, data: bytes | str, *, mode: int = 0o644) -> None:
        self._check_open()
        inner = self.inner_path(path)
        script = 'mkdir -p -- "$(dirname -- "$1")" && rm -f -- "$1" && cat > "$1" && chmod "$2" -- "$1"'
        cap = await self._raw_exec(["/bin/sh", "-c", script, "sh", inner, f"{mode:o}"], stdin=as_bytes(data))
        if cap.returncode != 0:
            raise ValueError(f"cannot write '{path}' in the sandbox: {decode(cap.stderr).strip()[:300]}")

    async def download(self, path: str, *, max_bytes: int = 64 << 20) -> bytes:
        self._check_open()
        cap = await self._raw_exec(["cat", "--", self.inner_path(path)], cap=max_bytes + 1)
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
        await cli(self.provider.binary, "rm", "-f", "-v", self.name, timeout=60)
        self.provider.registry.remove(self.id)


class DockerProvider(SandboxProvider):
    name = "docker"
    binary_env: ClassVar[str] = "PALAESTRA_DOCKER"
    default_binary: ClassVar[str] = "docker"

    def __init__(self, registry: Registry | None = None, *, reap: bool = True) -> None:
        self.binary = os.environ.get(self.binary_env) or shutil.which(self.default_binary) or self.default_binary
        self.user = os.environ.get("PALAESTRA_DOCKER_USER", "65534:65534")
        self.registry = registry or Registry()
        if reap:
            self.cleanup()

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return _engine_probe(os.environ.get(cls.binary_env) or shutil.which(cls.default_binary) or "")

    async def create(self, spec: SandboxSpec | None = None) -> DockerSandbox:
        self.require()
        spec = spec or SandboxSpec()
        image = spec.image or os.environ.get("PALAESTRA_DOCKER_IMAGE")
        if not image:
            raise SandboxError("the docker provider needs an image",
                               hint="set SandboxSpec.image, a task's metadata.image, or PALAESTRA_DOCKER_IMAGE")
        box_id = new_box_id(self.name)
        now = time.time()
        record: dict[str, Any] = {"id": box_id, "provider": self.name, "container": f"palaestra-{box_id}",
                                  "created": now, "labels": dict(spec.labels), **owner_fields(),
                                  "expires_at": now + spec.lifetime_s if spec.lifetime_s else None}
        self.registry.write(record)
        try:
            cap = await cli(self.binary, *self._run_args(spec, record, image), timeout=120)
            if cap.returncode != 0:
                raise SandboxError(f"{self.binary} run {image} failed: {decode(cap.stderr).strip()[:500]}",
                                   hint="is the image present (`docker images`)? nothing is pulled without network")
            box = DockerSandbox(self, spec, record, decode(cap.stdout).strip())
            if spec.files:
                await _seed(box, spec.files)
        except BaseException:
            await cli(self.binary, "rm", "-f", "-v", record["container"], timeout=60)
            self.registry.remove(box_id)
            raise
        return box

    def _run_args(self, spec: SandboxSpec, record: dict[str, Any], image: str) -> list[str]:
        uid, _, gid = self.user.partition(":")
        disk = f"{spec.disk_mb}m" if spec.disk_mb else "1g"
        args = ["run", "-d", "--name", record["container"], "--label", f"palaestra.sandbox={record['id']}",
                "--label", f"palaestra.owner={record['owner_pid']}:{record['owner_start']}",
                "--label", f"palaestra.host={record['host']}", "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges", "--user", self.user, "--read-only",
                "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,size={disk},mode=1777",
                "--tmpfs", f"{spec.workdir}:rw,exec,nosuid,nodev,size={disk},uid={uid},gid={gid or uid},mode=0755",
                "--workdir", spec.workdir, "--ulimit", f"nofile={spec.open_files}:{spec.open_files}",
                "--ulimit", "core=0", "--entrypoint", "/bin/sh"]
        args += ["--pull", os.environ.get("PALAESTRA_DOCKER_PULL", "missing")]
        for key, value in spec.labels.items():
            args += ["--label", f"palaestra.label.{key}={value}"]
        if spec.network == "none":
            args += ["--network", "none"]
        if spec.memory_mb:
            args += ["--memory", f"{spec.memory_mb}m", "--memory-swap", f"{spec.memory_mb}m"]
        if spec.pids:
            args += ["--pids-limit", str(spec.pids + 4)]
        if spec.cpus:
            args += ["--cpus", str(spec.cpus)]
        if spec.cpu_time_s:
            args += ["--ulimit", f"cpu={spec.cpu_time_s}:{spec.cpu_time_s}"]
        for m in spec.mounts:
            args += ["-v", f"{m.source}:{m.target}:{'rw' if m.writable else 'ro'}"]
        return [*args, image, "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600; done"]

    def cleanup(self, *, include_live: bool = False) -> int:
        """Remove containers of dead owners: by registry record, and by label for records lost."""
        removed = 0
        names: set[str] = set()
        for record in list(self.registry.records(self.name)):
            expired = record.get("expires_at") is not None and time.time() > float(record["expires_at"]) + 5
            if (include_live and is_own(record)) or not owner_alive(record) or expired:
                names.add(str(record["container"]))
                self.registry.remove(str(record["id"]))
        try:
            listed = subprocess.run([self.binary, "ps", "-a", "--filter", "label=palaestra.sandbox", "--format",
                                     '{{.Names}}\t{{.Label "palaestra.owner"}}\t{{.Label "palaestra.host"}}'],
                                    capture_output=True, text=True, timeout=30)
            for line in listed.stdout.splitlines():
                cname, owner, host = (line.split("\t") + ["", ""])[:3]
                pid, _, start = owner.partition(":")
                rec = {"owner_pid": int(pid) if pid.isdigit() else None, "host": host or None,
                       "owner_start": int(start) if start.isdigit() else None}
                if not owner_alive(rec) or (include_live and is_own(rec)):
                    names.add(cname)
            if names:
                subprocess.run([self.binary, "rm", "-f", "-v", *sorted(names)], capture_output=True, timeout=120)
                removed = len(names)
        except (OSError, subprocess.SubprocessError):
            pass
        return removed

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update({"binary": self.binary, "user": self.user, "network": "--network none",
                    "limits": "memory, pids, cpus, tmpfs size, nofile"})
        return out


async def _seed(box: DockerSandbox, files: Mapping[str, bytes | str]) -> None:
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


_PROBED: dict[str, tuple[bool, str]] = {}


def _engine_probe(binary: str) -> tuple[bool, str]:
    """Cached only when the engine answered: a daemon started later is still found."""
    if binary in _PROBED:
        return _PROBED[binary]
    found = _probe_once(binary)
    if found[0]:
        _PROBED[binary] = found
    return found


def _probe_once(binary: str) -> tuple[bool, str]:
    if not binary or not shutil.which(binary):
        return False, "no docker/podman CLI on PATH"
    try:
        proc = subprocess.run([binary, "version", "--format", "{{.Server.Version}}"], capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{binary} version failed: {exc}"
    if proc.returncode != 0 or not proc.stdout.strip():
        return False, f"no container engine answers ({(proc.stderr or '').strip()[:200]})"
    return True, f"{binary} engine {proc.stdout.strip()} on {socket.gethostname()}"


class PodmanProvider(DockerProvider):
    name = "podman"
    binary_env = "PALAESTRA_PODMAN"
    default_binary = "podman"
