"""``process``: the fallback where namespaces are unavailable (an unprivileged container, a locked-down
kernel). Commands run directly, in the box's host directory, with rlimits, the box's cgroups and a
dedicated uid when root, Landlock (read only system dirs and the box, write only the box and
``/dev/null``, ``/dev/zero``, ``/dev/full``; no TCP, no signals or abstract sockets outside) and a seccomp
filter (no IPv4/IPv6/packet sockets, no namespaces, mounts, ptrace...). What that does *not* isolate is
said loudly when the provider starts. ``/proc`` stays unreadable (other processes' command lines).

``none``: no isolation at all, for trusted code and debugging; explicit opt-in only (``--sandbox none``
or ``PALAESTRA_SANDBOX=none``). It still enforces timeouts and output caps and kills the process group.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from palaestra.sandbox import landlock, seccomp
from palaestra.sandbox.cgroups import features as cgroup_features
from palaestra.sandbox.hostbox import Command, HostSandbox
from palaestra.sandbox.hostprovider import HostProvider, world_traversable
from palaestra.sandbox.oslevel import IS_LINUX, ChildSetup, base_rlimits
from palaestra.sandbox.registry import threads_of_uid

log = logging.getLogger("palaestra.sandbox")

_SYSTEM_READ = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/opt")
# what ordinary programs open: the sinks read-write (``2>/dev/null``, ``os.devnull``), the entropy
# sources read-only; without the first, ``sh`` cannot redirect and Python's subprocess.DEVNULL fails
_DEVICES_RW = ("/dev/null", "/dev/zero", "/dev/full")
_DEVICES_RO = ("/dev/random", "/dev/urandom")
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


class ProcessSandbox(HostSandbox):
    provider_name = "process"
    direct = True

    def resolve(self, path: str) -> str:
        try:
            root, rel = self.host_location(path)
        except ValueError:
            return self.inner_path(path)
        return os.path.join(root, rel) if rel else root

    def spawn_cwd(self, inner_cwd: str) -> str | None:
        return self.resolve(inner_cwd)

    def _command(self, argv: Sequence[str], cwd: str, env: dict[str, str]) -> Command:
        return list(argv), [], env

    def _hardening(self) -> tuple[Any, ...]:
        steps: list[Any] = []
        if self.provider.use_landlock:
            ruleset = getattr(self, "_ruleset", None)
            if ruleset is None:
                prefixes = {sys.base_prefix, sys.prefix}
                reads = [*_SYSTEM_READ, *sorted(prefixes), *_DEVICES_RO]
                reads += [m.source for m in self.spec.mounts if not m.writable]
                writes = [self.work_dir, self.tmp_dir, *[m.source for m in self.spec.mounts if m.writable]]
                ruleset = landlock.Ruleset(read=reads, write=writes, devices=_DEVICES_RW,
                                           deny_tcp=self.spec.network == "none")
                self._ruleset = ruleset
            steps.append(ruleset.apply)
        if self.provider.use_seccomp:
            prepared = seccomp.loader(seccomp.build_filter(deny_inet=self.spec.network == "none"))
            self._seccomp_keep = prepared
            steps.append(lambda: seccomp.install(prepared))
        return tuple(steps)

    def child_setup(self) -> ChildSetup:
        setup = super().child_setup()
        setup.extra = self._hardening()
        if self.spec.pids and self.uid is None and not self.cgroups.has("pids"):
            # RLIMIT_NPROC counts every thread of the real uid: allow what runs now plus the box's share.
            setup.rlimits += ((resource.RLIMIT_NPROC, threads_of_uid(os.getuid()) + self.spec.pids),)
        return setup

    async def close(self) -> None:
        ruleset = getattr(self, "_ruleset", None)
        if ruleset is not None:
            ruleset.close()
        await super().close()


class ProcessProvider(HostProvider):
    """No namespaces: rlimits + Landlock + seccomp (+ uid and cgroups when root)."""

    name = "process"
    box_class = ProcessSandbox
    use_landlock = True
    use_seccomp = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.use_landlock = IS_LINUX and landlock.abi_version() > 0
        self.use_seccomp = seccomp.supported()
        super().__init__(*args, **kwargs)
        _warn_once(self.name, self.warning())

    @property
    def python(self) -> str:
        """This interpreter when the sandbox uid can run it, else the system's."""
        if not self.root_mode or world_traversable(sys.executable):
            return sys.executable
        return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return (os.name == "posix", "plain processes with rlimits" if os.name == "posix" else "needs a POSIX system")

    def missing(self) -> list[str]:
        gaps = ["no pid namespace (other processes' ids are visible via system calls)",
                "no mount namespace (paths outside the box exist; Landlock decides access)",
                "shared hostname and System V IPC"]
        feats = {k: v for k, v in cgroup_features().items() if v != "no"}
        lab = landlock.abi_version()
        if not lab:
            gaps.append("NO Landlock: the whole filesystem is readable and every path the uid may write is writable")
        elif lab < 4:
            gaps.append(f"Landlock ABI {lab} < 4: TCP is not restricted by Landlock")
        if not self.use_seccomp:
            gaps.append("NO seccomp: network sockets, ptrace and namespace calls are allowed")
        else:
            gaps.append("UDP to loopback is blocked only through the socket-family filter (AF_UNIX stays open)")
        if not self.root_mode:
            gaps.append("runs as YOUR uid: it may read your other processes' files where Landlock allows")
            if "cgroup_kill" not in feats and "pids" not in feats:
                gaps.append("no cgroup and no dedicated uid: a child that calls setsid and rewrites its "
                            "environment can survive a timeout")
        if "pids" not in feats:
            gaps.append("no pids cgroup: a fork bomb is bounded only by RLIMIT_NPROC" if self.root_mode
                        else "no pids cgroup and no dedicated uid: a fork bomb is bounded only by RLIMIT_NPROC "
                             "over all of your processes")
        if "memory" not in feats:
            gaps.append("no memory cgroup: memory is bounded per process by RLIMIT_AS only")
        return gaps

    def warning(self) -> str:
        return ("palaestra sandbox 'process' gives PARTIAL isolation (no namespaces on this machine or by choice). "
                "Not isolated: " + "; ".join(self.missing()) + ". Use PALAESTRA_SANDBOX=local (bubblewrap) or docker "
                "for untrusted code where possible.")

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update({"uid": "dedicated per sandbox" if self.root_mode else "caller's uid",
                    "landlock": f"ABI {landlock.abi_version()}" if self.use_landlock else "unavailable",
                    "seccomp": "deny-list + no inet sockets" if self.use_seccomp else "unavailable",
                    "not_isolated": self.missing(), **cgroup_features()})
        return out


class NoneSandbox(ProcessSandbox):
    provider_name = "none"

    def _hardening(self) -> tuple[Any, ...]:
        return ()

    def child_setup(self) -> ChildSetup:
        return ChildSetup(rlimits=base_rlimits(open_files=4096, cpu_time_s=None, file_mb=None, address_mb=None,
                                               nproc=None), parent_pid=os.getpid())


class NoneProvider(HostProvider):
    """No isolation whatsoever (explicit opt-in): timeouts, output caps and a process-group kill only."""

    name = "none"
    box_class = NoneSandbox
    dedicated_uid = False
    use_cgroups = False
    use_tmpfs = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _warn_once(self.name, "palaestra sandbox 'none': commands run with NO isolation, as your own user, with "
                              "full network and filesystem access. Use it only for trusted code.")

    @property
    def python(self) -> str:
        return sys.executable

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        return True, "no isolation (explicit opt-in)"
