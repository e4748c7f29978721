"""Small Linux primitives the providers share: prctl, rlimits, tmpfs mounts, and killing every process
of a dedicated uid. Kept free of asyncio so the pieces can run in a forked child before ``exec``."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from palaestra.sandbox.registry import pids_of_uid

IS_LINUX = sys.platform.startswith("linux")
_libc = ctypes.CDLL(None, use_errno=True) if IS_LINUX else None

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
MS_NOSUID = 2
MS_NODEV = 4
MNT_DETACH = 2


def libc() -> ctypes.CDLL:
    if _libc is None:
        raise OSError("libc calls are only available on Linux")
    return _libc


def prctl(option: int, arg: int) -> None:
    if libc().prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}) failed: {os.strerror(err)}")


def mount_tmpfs(target: str, size_mb: int, mode: int = 0o711) -> None:
    """A size-limited tmpfs for a box: its files can never fill the host disk."""
    opts = f"size={int(size_mb)}m,mode={mode:o}".encode()
    if libc().mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {target}: {os.strerror(err)}")


def umount(target: str) -> bool:
    if not IS_LINUX or not os.path.ismount(target):
        return False
    return bool(libc().umount2(target.encode(), MNT_DETACH) == 0)


def can_mount() -> bool:
    return IS_LINUX and os.geteuid() == 0


@dataclass
class ChildSetup:
    """What a forked child does before ``exec`` (in this order): join cgroups, set rlimits, drop to the
    sandbox uid, ask for SIGKILL when its parent dies, then any extra hardening (Landlock, seccomp)."""

    cgroup_procs: tuple[str, ...] = ()
    rlimits: tuple[tuple[int, int], ...] = ()
    uid: int | None = None
    gid: int | None = None
    parent_pid: int = 0
    extra: tuple[Callable[[], None], ...] = ()

    def __call__(self) -> None:
        for procs in self.cgroup_procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        for which, value in self.rlimits:
            # CPU: the soft limit sends SIGXCPU (reported as a CPU limit), the hard one SIGKILL a second later
            soft_hard = (value, value + 1) if which == resource.RLIMIT_CPU else (value, value)
            try:
                resource.setrlimit(which, soft_hard)
            except (ValueError, OSError):
                _, hard = resource.getrlimit(which)  # cannot raise past the hard limit: lower is still fine
                if hard != resource.RLIM_INFINITY and value > hard:
                    resource.setrlimit(which, (hard, hard))
                else:
                    raise
        if self.uid is not None:
            gid = self.gid if self.gid is not None else self.uid
            give_stdio_pipes(self.uid, gid)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(self.uid, self.uid, self.uid)
        if IS_LINUX:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid: a credential change clears it
            if self.parent_pid and os.getppid() != self.parent_pid:
                os._exit(137)
        for step in self.extra:
            step()


def give_stdio_pipes(uid: int, gid: int) -> None:
    """Hand the pipes on fds 0-2 to the sandbox uid. A pipe belongs to whoever made it (root, here) with
    mode 0600, and ``echo >/dev/stderr`` or ``cat /dev/stdin`` *reopen* it through ``/proc/self/fd``,
    which checks that owner: without this an ordinary shell script fails with "Permission denied".
    Only pipes: a device or file on those fds (``/dev/null`` for no stdin) is left as it is."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            st = os.fstat(fd)
            if stat.S_ISFIFO(st.st_mode) and st.st_uid != uid:
                os.fchown(fd, uid, gid)


def base_rlimits(*, open_files: int, cpu_time_s: int | None, file_mb: int | None,
                 address_mb: int | None, nproc: int | None) -> tuple[tuple[int, int], ...]:
    limits: list[tuple[int, int]] = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, open_files)]
    if cpu_time_s:
        limits.append((resource.RLIMIT_CPU, int(cpu_time_s)))
    if file_mb:
        limits.append((resource.RLIMIT_FSIZE, int(file_mb) << 20))
    if address_mb:
        limits.append((resource.RLIMIT_AS, int(address_mb) << 20))
    if nproc:
        limits.append((resource.RLIMIT_NPROC, int(nproc)))
    return tuple(limits)


def kill_uid(uid: int, *, rounds: int = 200) -> int:
    """SIGKILL every process of ``uid`` until none is left, whatever it did (setsid, double fork, a
    fork bomb). A helper running *as* the uid calls ``kill(-1, SIGKILL)`` in a loop: that reaches every
    process of the uid in one syscall, so forking cannot outrun it. Needs root. Returns survivors."""
    if os.geteuid() != 0 or not pids_of_uid(uid):
        return 0
    script = f"i=0; while kill -9 -1 2>/dev/null && [ $i -lt {rounds} ]; do i=$((i+1)); done; exit 0"
    for _ in range(3):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["/bin/sh", "-c", script], user=uid, group=uid, extra_groups=[], timeout=10,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={"PATH": "/usr/bin:/bin"}, close_fds=True)
        left = pids_of_uid(uid)
        if not left:
            return 0
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    return len(pids_of_uid(uid))


def killpg(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
