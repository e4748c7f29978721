"""Per-sandbox cgroups where the machine lets us write them: v2 (``cgroup.kill`` kills a whole tree in
one write; ``memory``/``pids``/``cpu`` controllers when delegated) and v1 controllers (``pids``,
``memory``, ``cpu``) on hybrid hosts. Each box gets one directory per hierarchy; the paths go into the
registry record so a later reaper can kill and remove them.

Nothing here is required: a machine without writable cgroups still gets rlimits and uid/pid-namespace
kills, and ``describe()`` says what is missing."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

PARENT = "palaestra"


@dataclass(frozen=True)
class Hierarchy:
    base: str                 # directory under which box cgroups are made
    version: int              # 1 or 2
    controllers: frozenset[str]


def _own_paths() -> dict[str, str]:
    """Controller (or "" for v2) → this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            for ctrl in (parts[1].split(",") if parts[1] else [""]):
                out[ctrl] = parts[2]
    return out


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(fstype, mountpoint, options) of cgroup mounts."""
    found: list[tuple[str, str, set[str]]] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) < 5 or len(rfields) < 3 or rfields[0] not in ("cgroup", "cgroup2"):
                continue
            found.append((rfields[0], fields[4], set(rfields[2].split(","))))
    return found


def _try_base(path: Path) -> bool:
    try:
        path.mkdir(exist_ok=True)
        probe = path / f"probe-{os.getpid()}-{os.urandom(3).hex()}"
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


@lru_cache(maxsize=1)
def hierarchies() -> tuple[Hierarchy, ...]:
    """The writable hierarchies, probed once per process."""
    own = _own_paths()
    found: list[Hierarchy] = []
    wanted_v1 = {"pids", "memory", "cpu"}
    for fstype, mnt, opts in _mounts():
        if fstype == "cgroup2":
            rel = own.get("", "/").lstrip("/")
            for candidate in ([Path(mnt) / PARENT] + ([Path(mnt) / rel / PARENT] if rel else [])):
                if _try_base(candidate):
                    ctrls = _enable_v2(candidate)
                    found.append(Hierarchy(str(candidate), 2, frozenset(ctrls)))
                    break
        else:
            ctrls = opts & wanted_v1
            if not ctrls or any(c in h.controllers for h in found for c in ctrls):
                continue
            rel = own.get(next(iter(ctrls)), "/").lstrip("/")
            candidate = Path(mnt) / rel / PARENT
            if _try_base(candidate):
                found.append(Hierarchy(str(candidate), 1, frozenset(ctrls)))
    v2 = [h for h in found if h.version == 2]
    v1 = [h for h in found if h.version == 1 and not any(h.controllers & x.controllers for x in v2)]
    return tuple(v2 + v1)


def _enable_v2(base: Path) -> set[str]:
    """Turn on memory/pids/cpu for children of ``base`` (and of its parent), as far as allowed."""
    enabled: set[str] = set()
    for directory in (base.parent, base):
        with contextlib.suppress(OSError):
            available = set((directory / "cgroup.controllers").read_text().split())
            for ctrl in ("memory", "pids", "cpu"):
                if ctrl in available:
                    with contextlib.suppress(OSError):
                        (directory / "cgroup.subtree_control").write_text(f"+{ctrl}")
    with contextlib.suppress(OSError):
        enabled = set((base / "cgroup.subtree_control").read_text().split()) & {"memory", "pids", "cpu"}
    return enabled


def features() -> dict[str, str]:
    hs = hierarchies()
    out = {"cgroup_kill": "no"}
    for h in hs:
        if h.version == 2 and Path(h.base, "cgroup.kill").exists():
            out["cgroup_kill"] = f"v2 {h.base}"
        for c in h.controllers:
            out[c] = f"v{h.version} {h.base}"
    return out


@dataclass
class BoxCgroups:
    """The cgroup directories of one box (possibly none)."""

    paths: list[str] = field(default_factory=list)

    @classmethod
    def plan(cls, box_id: str, want: set[str] | frozenset[str] = frozenset({"memory", "pids", "cpu"})) -> BoxCgroups:
        """Only the hierarchies whose controllers a limit needs: joining each one costs the child a
        cgroup migration (an RCU grace period) on every exec. With no limit wanted, one hierarchy
        (v2 first, for ``cgroup.kill``) still tracks the tree so it can be killed."""
        hs = hierarchies()
        chosen = [h for h in hs if h.controllers & want]
        if not chosen and hs:
            chosen = [hs[0]]
        return cls([str(Path(h.base) / box_id) for h in chosen])

    def create(self, *, memory_mb: int | None, pids: int | None, cpus: float | None) -> None:
        for path in self.paths:
            p = Path(path)
            p.mkdir(exist_ok=True)
            _limit(p, memory_mb=memory_mb, pids=pids, cpus=cpus)

    def procs_files(self) -> tuple[str, ...]:
        return tuple(str(Path(p) / "cgroup.procs") for p in self.paths if Path(p).is_dir())

    def has(self, controller: str) -> bool:
        return any(_ctrl_file(Path(p), controller) for p in self.paths)

    def counters(self) -> dict[str, int]:
        """Cumulative OOM kills and pids-limit hits, to diff around an exec."""
        out = {"oom": 0, "pids": 0}
        for path in self.paths:
            p = Path(path)
            for name, key, tag in (("memory.events", "oom", "oom_kill"), ("memory.oom_control", "oom", "oom_kill"),
                                   ("pids.events", "pids", "max")):
                with contextlib.suppress(OSError, ValueError):
                    for line in (p / name).read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == tag:
                            out[key] += int(v)
        return out

    def pids(self) -> set[int]:
        found: set[int] = set()
        for procs in self.procs_files():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in Path(procs).read_text().split())
        return found

    def kill(self, *, rounds: int = 100) -> bool:
        """Kill every process in the box's cgroups; True when they are empty afterwards."""
        for path in self.paths:
            with contextlib.suppress(OSError):
                Path(path, "cgroup.kill").write_text("1")
        for _ in range(rounds):
            left = self.pids()
            if not left:
                return True
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)
        return not self.pids()

    def remove(self) -> None:
        for path in self.paths:
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill(rounds=5)
                    time.sleep(0.01)


def _ctrl_file(p: Path, controller: str) -> bool:
    names = {"memory": ("memory.max", "memory.limit_in_bytes"), "pids": ("pids.max",),
             "cpu": ("cpu.max", "cpu.cfs_quota_us")}[controller]
    return any((p / n).exists() for n in names)


def _write(path: Path, value: str) -> None:
    if path.exists():
        with contextlib.suppress(OSError):
            path.write_text(value)


def _limit(p: Path, *, memory_mb: int | None, pids: int | None, cpus: float | None) -> None:
    if memory_mb:
        size = str(int(memory_mb) << 20)
        _write(p / "memory.max", size)
        _write(p / "memory.swap.max", "0")
        _write(p / "memory.limit_in_bytes", size)
        _write(p / "memory.memsw.limit_in_bytes", size)
    if pids:
        _write(p / "pids.max", str(int(pids)))
    if cpus:
        period = 100_000
        quota = max(1000, int(cpus * period))
        _write(p / "cpu.max", f"{quota} {period}")
        _write(p / "cpu.cfs_period_us", str(period))
        _write(p / "cpu.cfs_quota_us", str(quota))
