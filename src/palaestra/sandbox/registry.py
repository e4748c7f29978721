"""The sandbox registry: one JSON file per live sandbox in a state directory, written *before* anything
is created, so whatever a crashed runtime left (processes of a dedicated uid, cgroups, a tmpfs mount, a
directory, a container) can be found and removed by the next runtime's reaper.

A record names its owner by pid *and* the owner's start time, so a recycled pid never keeps a dead
run's leftovers alive. Dedicated uids are allocated with ``O_EXCL`` files in the same directory, which
makes allocation safe across concurrent runtimes on one machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import random
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from palaestra.sandbox.types import SandboxError
from palaestra.settings import machine

UID_RANGE_ENV = "PALAESTRA_SANDBOX_UIDS"
STATE_ENV = "PALAESTRA_SANDBOX_STATE"
DEFAULT_UIDS = (61000, 63999)


def state_root() -> Path:
    """Where records and box directories live: ``$PALAESTRA_SANDBOX_STATE``, else ``/run/palaestra``
    for root, ``$XDG_RUNTIME_DIR/palaestra`` or ``/tmp/palaestra-<uid>`` for a user."""
    s = machine()
    explicit = s.sandbox_state  # $PALAESTRA_SANDBOX_STATE
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0 and os.access("/run", os.W_OK):
        return Path("/run/palaestra")
    runtime = s.runtime_dir
    if runtime and os.access(runtime, os.W_OK):
        return Path(runtime) / "palaestra"
    return Path(tempfile.gettempdir()) / f"palaestra-{os.geteuid()}"


def engine_cwd() -> str:
    """The working directory of every container-engine command (``docker``, ``podman``, ``runsc``): a
    directory of Palaestra's own. An engine's helpers write beside themselves (podman's ``conmon`` leaves
    an empty ``oom`` file in its working directory when a container is OOM-killed), so run from the user's
    directory they litter it."""
    path = state_root() / "engine"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return str(path)


def process_start(pid: int) -> int | None:
    """The start time of a process in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    try:
        return int(raw[raw.rindex(b")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


_SELF_START = process_start(os.getpid())


def owner_fields() -> dict[str, Any]:
    pid = os.getpid()
    start = _SELF_START if pid == _OWNER_PID else process_start(pid)
    return {"owner_pid": pid, "owner_start": start, "host": socket.gethostname()}


_OWNER_PID = os.getpid()


def owner_alive(record: dict[str, Any]) -> bool:
    """True while the runtime that created a record still runs (same pid *and* same start time)."""
    pid = record.get("owner_pid")
    if not isinstance(pid, int):
        return False
    if record.get("host") not in (None, socket.gethostname()):
        return True  # another machine's record (shared state dir): not ours to judge
    start = process_start(pid)
    if start is None:
        return False
    recorded = record.get("owner_start")
    return recorded is None or recorded == start


def is_own(record: dict[str, Any]) -> bool:
    return record.get("owner_pid") == os.getpid() and owner_alive(record)


class Registry:
    """Records under ``<root>/records``, uid claims under ``<root>/uids``, box dirs under ``<root>/boxes``."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or state_root()
        self.records_dir = self.root / "records"
        self.uids_dir = self.root / "uids"
        self.boxes_dir = self.root / "boxes"
        try:
            for d, mode in ((self.root, 0o755), (self.records_dir, 0o700), (self.uids_dir, 0o700),
                            (self.boxes_dir, 0o711)):
                d.mkdir(parents=True, exist_ok=True)
                if d.stat().st_uid == os.geteuid():
                    d.chmod(mode)
        except OSError as exc:
            raise SandboxError(f"cannot create the sandbox state directory {self.root}: {exc}",
                               hint=f"set {STATE_ENV} to a writable directory") from exc

    # ---- records -------------------------------------------------------------------------------
    def write(self, record: dict[str, Any], *, sync: bool = True) -> None:
        """Atomically (re)write a record; fsynced (when ``sync``), as it is what the reaper trusts."""
        path = self.records_dir / f"{record['id']}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        data = json.dumps(record, sort_keys=True).encode()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def remove(self, box_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.records_dir / f"{box_id}.json").unlink()

    def records(self, provider: str | None = None) -> Iterator[dict[str, Any]]:
        for path in sorted(self.records_dir.glob("*.json")):
            try:
                record = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and (provider is None or record.get("provider") == provider):
                yield record

    # ---- dedicated uids ------------------------------------------------------------------------
    @staticmethod
    def uid_range() -> tuple[int, int]:
        raw = machine().sandbox_uids  # $PALAESTRA_SANDBOX_UIDS
        if not raw:
            return DEFAULT_UIDS
        try:
            lo, hi = (int(x) for x in raw.split("-", 1))
        except ValueError:
            raise SandboxError(f"{UID_RANGE_ENV}={raw!r} is not a range like 61000-63999") from None
        if not 1000 <= lo <= hi:
            raise SandboxError(f"{UID_RANGE_ENV}={raw!r}: the range must start at 1000 or above")
        return lo, hi

    def allocate_uid(self, box_id: str) -> int:
        """Claim a uid no account and no process uses; the claim file names the box that holds it."""
        lo, hi = self.uid_range()
        busy = _busy_uids()
        candidates = list(range(lo, hi + 1))
        random.shuffle(candidates)
        claim = json.dumps({"box": box_id, **owner_fields()}).encode()
        for uid in candidates[:512]:
            if uid in busy or _has_account(uid):
                continue
            try:
                fd = os.open(self.uids_dir / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                continue
            try:
                os.write(fd, claim)
                os.fsync(fd)
            finally:
                os.close(fd)
            return uid
        raise SandboxError(f"no free sandbox uid in {lo}-{hi}",
                           hint=f"run `palaestra sandbox cleanup`, or widen {UID_RANGE_ENV}")

    def release_uid(self, uid: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.uids_dir / str(uid)).unlink()

    def uid_claims(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for path in self.uids_dir.iterdir():
            if not path.name.isdigit():
                continue
            try:
                claim = json.loads(path.read_bytes())
            except (OSError, ValueError):
                claim = {}
            yield int(path.name), claim if isinstance(claim, dict) else {}


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def proc_uids(pid: str, *, live_only: bool = False) -> tuple[int, ...]:
    """Real, effective, saved and filesystem uid of a process (immune to PR_SET_DUMPABLE tricks).
    With ``live_only``, a zombie (dead, waiting for its parent to reap it) counts as no process."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if live_only and line.startswith(b"State:") and line.split()[1:2] in ([b"Z"], [b"X"]):
                    return ()
                if line.startswith(b"Uid:"):
                    return tuple(int(x) for x in line.split()[1:5])
    except (OSError, ValueError):
        pass
    return ()


_BUSY: tuple[float, set[int]] = (0.0, set())


def _busy_uids(max_age: float = 5.0) -> set[int]:
    """``uids_in_use`` cached a few seconds: claims are authoritative among runtimes; the scan only
    guards against foreign processes that happen to use a uid of the range."""
    global _BUSY
    now = time.monotonic()
    if now - _BUSY[0] > max_age:
        _BUSY = (now, uids_in_use())
    return _BUSY[1]


def uids_in_use() -> set[int]:
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                found.update(proc_uids(name, live_only=True))
    return found


def pids_of_uid(uid: int) -> list[int]:
    """Live (non-zombie) processes of ``uid``."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit() and uid in proc_uids(name, live_only=True):
                out.append(int(name))
    return out


def threads_of_uid(uid: int) -> int:
    """What RLIMIT_NPROC counts for ``uid``: every thread, zombies included (they count until reaped)."""
    total = 0
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit() and proc_uids(name)[:1] == (uid,):
                with contextlib.suppress(OSError):
                    total += max(1, len(os.listdir(f"/proc/{name}/task")))
    return total


def new_box_id(prefix: str) -> str:
    return f"{prefix}-{int(time.time()):x}-{os.urandom(5).hex()}"
