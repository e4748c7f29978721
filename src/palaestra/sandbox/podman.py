"""``podman``: the docker provider's containers, driven through podman's docker-compatible CLI, with the
settings a machine needs stated up front instead of failing at the first ``run``.

What podman needs differs per machine, so it is detected (and shown by ``palaestra sandbox info``):

* **OCI runtime.** ``crun`` (podman's usual default) cannot create containers on a cgroups-v1 or hybrid
  host; there ``runc`` is used. ``runtime=runsc`` (``podman?runtime=runsc``) runs each container under
  gVisor, with ``--runtime-flag network=none``: gVisor refuses to start with networking in the host's
  network namespace, which is what podman's ``--network none`` leaves it.
* **cgroup manager.** ``systemd`` only where systemd runs as init (``/run/systemd/system``); everywhere
  else (containers, CI machines) ``cgroupfs``, which needs no D-Bus.
* **ulimits.** podman asks the runtime for generous ``nofile``/``nproc`` limits, which a process whose own
  hard limits are lower cannot set ("error setting rlimit ... operation not permitted"). Every container
  gets ``nofile`` from its spec and ``nproc`` capped at :data:`NPROC_CAP` (``--pids-limit`` bounds each
  container's processes; ``nproc`` only has to be settable).

Everything else (labels, read-only root, no capabilities, pull policy ``never``, the reaper) is the docker
provider's: the CLIs agree on all of it. :func:`podman_engine` gives the same flags to other code that
calls podman (image builds), so both see one storage and one configuration.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from functools import lru_cache
from typing import Any, ClassVar

from palaestra.sandbox.docker import DockerProvider
from palaestra.sandbox.types import SandboxSpec

NPROC_CAP = 4096


def cgroup_version() -> str:
    """``v2`` (unified), ``hybrid`` (v1 controllers plus a v2 mount) or ``v1``."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return "v2"
    return "hybrid" if os.path.isdir("/sys/fs/cgroup/unified") else "v1"


def default_runtime() -> str | None:
    """``runc`` where crun cannot work (cgroups v1/hybrid); ``None`` leaves podman's own choice."""
    return "runc" if cgroup_version() != "v2" and shutil.which("runc") else None


def cgroup_manager() -> str:
    return "systemd" if os.path.isdir("/run/systemd/system") else "cgroupfs"


def podman_engine(binary: str = "podman", runtime: str | None = None) -> list[str]:
    """``podman`` with the global flags this machine needs (see the module doc)."""
    runtime = runtime or default_runtime()
    flags = [binary, f"--cgroup-manager={cgroup_manager()}"]
    if runtime:
        flags += ["--runtime", runtime]
    if runtime == "runsc":
        flags += ["--runtime-flag", "network=none"]
    return flags


def nproc_limit() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    return NPROC_CAP if hard == resource.RLIM_INFINITY else min(hard, NPROC_CAP)


@lru_cache(maxsize=8)
def _probe(engine: tuple[str, ...]) -> tuple[bool, str]:
    """``podman info`` answers without a daemon; cached per flag set (podman has no service to start later)."""
    try:
        proc = subprocess.run([*engine, "info", "--format", "{{.Version.Version}} {{.Host.OCIRuntime.Name}}"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"`podman info` failed: {exc}"
    if proc.returncode != 0:
        return False, f"`podman info` failed: {proc.stderr.strip()[:300]}"
    version, _, runtime = proc.stdout.strip().partition(" ")
    return True, f"podman {version}, runtime {runtime}, cgroup manager {cgroup_manager()} (cgroups {cgroup_version()})"


class PodmanProvider(DockerProvider):
    name = "podman"
    binary_env: ClassVar[str] = "PALAESTRA_PODMAN"
    binary_setting: ClassVar[str] = "podman_bin"
    default_binary: ClassVar[str] = "podman"

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        from palaestra.settings import machine

        binary = cls._binary(machine())
        if not binary or not shutil.which(binary):
            return False, "podman is not installed (Debian: apt-get install podman runc)"
        return _probe(tuple(podman_engine(binary)))

    def global_flags(self) -> list[str]:
        return podman_engine(self.binary, self.runtime)[1:]

    def run_flags(self, spec: SandboxSpec) -> list[str]:
        if self.runtime == "runsc" and spec.pids:
            return []  # _run_args sets nproc to the spec's limit, which gVisor's kernel enforces
        return ["--ulimit", f"nproc={nproc_limit()}:{nproc_limit()}"]

    def tmpfs_owner(self, uid: str, gid: str) -> str:
        return "U"  # podman 4 has no uid=/gid= tmpfs options; U chowns the mount to the --user

    def runtime_available(self, runtime: str) -> tuple[bool, str]:
        if not shutil.which(runtime):
            return False, f"{runtime} is not installed"
        if runtime == "runsc":
            from palaestra.sandbox.gvisor import GvisorProvider

            ok, why = GvisorProvider.availability()  # one real gVisor sandbox
            if not ok:
                return False, why
        return _probe(tuple(podman_engine(self.binary, runtime)))

    def runtime_hint(self, runtime: str) -> str:
        return f"install {runtime} (Debian: apt-get install {runtime})"

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update({"runtime": self.runtime or default_runtime() or "podman's default",
                    "cgroup manager": cgroup_manager(), "cgroups": cgroup_version(),
                    "ulimits": f"nofile from the spec, nproc {nproc_limit()}"})
        return out
