"""``gvisor``: each sandbox an OCI container run by gVisor's ``runsc`` directly, with no container engine:
the strongest isolation one machine gives (the code talks to gVisor's user-space kernel, never to the
host's), and the choice for hostile code.

A sandbox is an OCI bundle (a ``config.json`` in the box directory) over a shared, read-only root
filesystem (the local base image unpacked once, :mod:`palaestra.sandbox.baseimage`, or a directory given
as the spec's ``image``), started with ``runsc run --detach`` and driven with ``runsc exec``: the same
container class as docker and podman, whose every operation is an exec. ``workdir`` and ``/tmp`` are
size-limited tmpfs mounts inside gVisor; networking is off (``--network=none``: no interface but loopback,
whatever the spec asks). Memory and CPU limits apply to the host cgroup of the whole sandbox
(``/palaestra/<container>``); the process limit is RLIMIT_NPROC, which gVisor's kernel enforces (the
host's pids limit only bounds gVisor's own threads). Container state lives under ``<state>/runsc``, so the
reaper finds every container a crashed runtime left, by record and by ``runsc list``.

Needs root (rootless ``runsc run`` needs user-namespace setup this provider does not do) and the default
platform: ``--platform=kvm`` hangs where nested virtualisation is off.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

from palaestra.sandbox.baseimage import BASE_IMAGE, ensure_rootfs
from palaestra.sandbox.docker import RUNSC_HOST_PIDS, DockerProvider
from palaestra.sandbox.docker_box import cli
from palaestra.sandbox.registry import Registry, is_own, owner_alive
from palaestra.sandbox.types import SandboxError, SandboxSpec
from palaestra.settings import Settings, machine

_KEEPALIVE = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
_CAPS: dict[str, list[str]] = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}


@lru_cache(maxsize=2)
def _probe(binary: str) -> tuple[bool, str]:
    """One real sandbox (``runsc do /bin/true``), once per process: a present but broken runsc says why."""
    try:
        proc = subprocess.run([binary, "--network=none", "do", "/bin/true"], capture_output=True, text=True,
                              timeout=60, cwd="/")
        version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"runsc failed to start a sandbox: {exc}"
    if proc.returncode != 0:
        return False, f"`runsc do /bin/true` failed: {(proc.stderr or proc.stdout).strip()[-300:]}"
    first = (version.stdout.splitlines() or ["runsc"])[0]
    return True, f"{first}, default platform, --network=none"


class GvisorProvider(DockerProvider):
    name = "gvisor"
    default_binary: ClassVar[str] = "runsc"

    def __init__(self, registry: Registry | None = None, *, reap: bool = True, image: str | None = None,
                 settings: Settings | None = None) -> None:
        """``image``: a root filesystem directory for specs that name none (default: the base image,
        unpacked under the state directory at the first create)."""
        self.registry = registry or Registry()
        self.state_dir = self.registry.root / "runsc"
        self.state_dir.mkdir(mode=0o700, exist_ok=True)
        self.base_rootfs = self.registry.root / "images" / BASE_IMAGE.replace(":", "-")
        super().__init__(self.registry, reap=reap, image=image or str(self.base_rootfs), settings=settings)

    @classmethod
    def _binary(cls, settings: Settings) -> str | None:
        return shutil.which(cls.default_binary)  # runsc from PATH (Debian's package: /usr/bin/runsc)

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        binary = cls._binary(machine())
        if not binary:
            return False, "runsc is not installed (Debian: apt-get install runsc)"
        if os.geteuid() != 0:
            return False, "runsc run needs root here (rootless gVisor needs user-namespace setup)"
        return _probe(binary)

    def global_flags(self) -> list[str]:
        return ["--root", str(self.state_dir), "--network=none"]

    def exec_args(self, container: str, *, user: str, cwd: str | None, env: Mapping[str, str],
                  interactive: bool) -> list[str]:
        args = ["exec", "--user", user] + (["--cwd", cwd] if cwd else [])
        for key, value in env.items():
            args += ["--env", f"{key}={value}"]
        return [*args, container]

    @property
    def host_processes(self) -> bool:
        return False  # the box's cgroup holds gVisor's sentry and gofer, never the sandbox's processes

    async def container_state(self, container: str) -> str:
        cap = await cli(*self.engine, "state", container, timeout=15)
        try:
            return str(json.loads(cap.stdout).get("status") or "missing")
        except ValueError:
            return "missing"

    async def remove_container(self, container: str) -> None:
        await cli(*self.engine, "delete", "--force", container, timeout=60)
        shutil.rmtree(self.registry.boxes_dir / container, ignore_errors=True)

    async def _start(self, spec: SandboxSpec, record: dict[str, Any], image: str) -> str:
        rootfs = Path(image)
        if rootfs == self.base_rootfs:
            ensure_rootfs(rootfs)
        if not (rootfs / "bin" / "sh").exists():
            raise SandboxError(f"gvisor: the image {image!r} is not a root filesystem directory with /bin/sh",
                               hint="give SandboxSpec.image as a directory (an unpacked image), or leave it "
                                    "unset for the local base image")
        bundle = self.registry.boxes_dir / str(record["container"])
        bundle.mkdir(mode=0o700, parents=True, exist_ok=True)
        (bundle / "config.json").write_text(json.dumps(self.oci_config(spec, str(rootfs), record)))
        # not through cli(): the detached sandbox inherits the command's stdio, and a pipe it holds open would
        # look like a command that never finished. Its output goes to a log in the bundle instead.
        log = bundle / "runsc.log"
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.engine, "run", "--detach", "--bundle", str(bundle), str(record["container"]),
                stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True, cwd=bundle)
            try:
                rc = await asyncio.wait_for(proc.wait(), 120)
            except asyncio.TimeoutError:
                proc.kill()
                rc = await proc.wait()
        finally:
            os.close(fd)
        if rc != 0:
            raise SandboxError(f"runsc run failed ({rc}): {log.read_text(errors='replace').strip()[-500:]}",
                               hint="check `runsc --network=none do /bin/true` on this machine")
        return str(record["container"])

    def oci_config(self, spec: SandboxSpec, rootfs: str, record: dict[str, Any]) -> dict[str, Any]:
        """The OCI runtime config of one sandbox (runtime-spec 1.0)."""
        uid, _, gid = self.user.partition(":")
        disk = f"size={spec.disk_mb or 1024}m"
        rlimits = [("RLIMIT_NOFILE", spec.open_files), ("RLIMIT_CORE", 0)]
        if spec.pids:
            rlimits.append(("RLIMIT_NPROC", spec.pids + 4))
        if spec.cpu_time_s:
            rlimits.append(("RLIMIT_CPU", spec.cpu_time_s))
        resources: dict[str, Any] = {"pids": {"limit": RUNSC_HOST_PIDS}}
        if spec.memory_mb:
            resources["memory"] = {"limit": spec.memory_mb << 20, "swap": spec.memory_mb << 20}
        if spec.cpus:
            resources["cpu"] = {"quota": int(spec.cpus * 100_000), "period": 100_000}
        tmpfs = ["nosuid", "nodev", disk]
        mounts: list[dict[str, Any]] = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "ro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": [*tmpfs, "mode=1777"]},
            {"destination": spec.workdir, "type": "tmpfs", "source": "tmpfs", "options": [*tmpfs, "mode=1777"]}]
        for m in spec.mounts:
            mounts.append({"destination": m.target, "type": "bind", "source": str(m.source),
                           "options": ["rbind", "rw" if m.writable else "ro"]})
        return {
            "ociVersion": "1.0.2", "hostname": "sandbox", "root": {"path": rootfs, "readonly": True},
            "process": {"terminal": False, "user": {"uid": int(uid), "gid": int(gid or uid)},
                        "args": ["/bin/sh", "-c", _KEEPALIVE], "cwd": spec.workdir,
                        "env": ["PATH=/usr/local/bin:/usr/bin:/bin", f"HOME={spec.workdir}"],
                        "capabilities": _CAPS, "noNewPrivileges": True,
                        "rlimits": [{"type": t, "hard": v, "soft": v} for t, v in rlimits]},
            "mounts": mounts,
            "annotations": {"palaestra.sandbox": str(record["id"]),
                            "palaestra.owner": f"{record['owner_pid']}:{record['owner_start']}"},
            "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
                      "cgroupsPath": f"/palaestra/{record['container']}", "resources": resources}}

    def cleanup(self, *, include_live: bool = False) -> int:
        """Delete the containers of dead owners (by record), and containers under our state directory
        that no record names (a crash between ``runsc run`` and the record write cannot happen: the
        record comes first, but a record removed by hand can)."""
        doomed: set[str] = set()
        live: set[str] = set()
        for record in list(self.registry.records(self.name)):
            expired = record.get("expires_at") is not None and time.time() > float(record["expires_at"]) + 5
            if (include_live and is_own(record)) or not owner_alive(record) or expired:
                doomed.add(str(record["container"]))
                self.registry.remove(str(record["id"]))
            else:
                live.add(str(record["container"]))
        try:
            listed = subprocess.run([*self.engine, "list", "--format", "json"], capture_output=True, text=True,
                                    timeout=30)
            for entry in json.loads(listed.stdout or "[]") or []:
                cid = str(entry.get("id", ""))
                if cid.startswith(f"palaestra-{self.name}-") and cid not in live:
                    doomed.add(cid)
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
        for cid in sorted(doomed):
            subprocess.run([*self.engine, "delete", "--force", cid], capture_output=True, timeout=60)
            shutil.rmtree(self.registry.boxes_dir / cid, ignore_errors=True)
        return len(doomed)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update({"network": "--network=none (loopback only)", "runtime": "runsc (standalone, no engine)",
                    "image": f"a rootfs directory; default the base image at {self.base_rootfs}",
                    "limits": "memory, cpus (host cgroup), nproc (gVisor's kernel), tmpfs size, nofile"})
        return out
