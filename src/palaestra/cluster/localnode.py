"""Ray nodes started as child processes of this one (a head, or a worker joining it), all on 127.0.0.1:
for tests, benchmarks and trying a multi-node setup on one machine.

Each node is ``ray start --block`` under our wrapper, so it is one process we own: stopping it sends
SIGTERM (Ray then stops the node's processes), and anything that outlives that is killed by the PIDs we
recorded. Nothing is ever stopped by name: ``ray stop`` would take other users' clusters with it."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from palaestra.cluster.runtime import LOOPBACK_IP, ClusterError
from palaestra.server.ports import free_port


def auth_env() -> dict[str, str]:
    """A fresh token for a private cluster, so nothing is written to ~/.ray and no other cluster's token
    is needed. The driver must carry the same variables."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class RayNode:
    process: subprocess.Popen[bytes]
    log: Path
    address: str  # the head's GCS address (host:port)
    head: bool
    env: dict[str, str] = field(default_factory=dict)
    _seen: dict[int, str] = field(default_factory=dict)  # pid -> start time, of every process seen

    def pids(self) -> list[int]:
        """This node's processes now (the wrapper and all its descendants), remembered for ``stop``."""
        kids = _children()
        out, todo = [], [self.process.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(kids.get(pid, []))
        for pid in out:
            start = _start_time(pid)
            if start is not None:
                self._seen.setdefault(pid, start)
        return out

    def pid_of(self, needle: str) -> int | None:
        """The first process of this node whose command line contains ``needle`` (e.g. ``raylet``)."""
        for pid in self.pids():
            if pid != self.process.pid and needle in _cmdline(pid):
                return pid
        return None

    @staticmethod
    def cmdline(pid: int) -> str:
        """A process's command line (Ray's workers show their role there, e.g. ``ray::RolloutWorker``)."""
        return _cmdline(pid)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = 20.0) -> None:
        self.pids()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        deadline = time.monotonic() + 5.0
        for pid, start in self._seen.items():
            while _start_time(pid) == start and time.monotonic() < deadline:
                time.sleep(0.1)  # let it finish its own shutdown first
            if _start_time(pid) == start:  # same process still there (not a reused PID)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def leftovers(self) -> list[int]:
        """Processes of this node still running (zombies excluded): empty after a clean ``stop``."""
        out = []
        for pid, start in self._seen.items():
            if _start_time(pid) == start:
                try:
                    if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                        out.append(pid)
                except OSError:
                    pass
        return out


def _start(args: list[str], log: Path, env: dict[str, str], address: str, head: bool,
           timeout_s: float) -> RayNode:
    child_env = {**os.environ, **env}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "palaestra.cluster.raycli", "start", "--block", *args],
                                stdout=fh, stderr=subprocess.STDOUT, env=child_env, start_new_session=True)
    node = RayNode(proc, log, address, head, env)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        text = log.read_text(errors="replace")
        if "Ray runtime started" in text:
            node.pids()
            return node
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    node.stop()
    raise ClusterError(f"Ray {'head' if head else 'worker'} node did not start: "
                       f"{log.read_text(errors='replace')[-1500:]}", hint=f"full log: {log}")


def start_head(temp_dir: Path, *, cpus: int = 1, object_store_mb: int = 100, port: int | None = None,
               env: dict[str, str] | None = None, timeout_s: float = 120.0) -> RayNode:
    """A head node on 127.0.0.1 with its own temp dir, no dashboard and a small object store."""
    port = port or free_port()
    args = ["--head", f"--node-ip-address={LOOPBACK_IP}", f"--port={port}", f"--num-cpus={cpus}",
            "--include-dashboard=false", f"--object-store-memory={object_store_mb * 1024 * 1024}",
            f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    return _start(args, temp_dir / "palaestra-head.log", dict(env or {}), f"{LOOPBACK_IP}:{port}", True, timeout_s)


def start_worker(address: str, log_dir: Path, *, cpus: int = 1, object_store_mb: int = 100,
                 env: dict[str, str] | None = None, timeout_s: float = 120.0) -> RayNode:
    """Another node joining ``address``: a separate process tree, as a second machine would be."""
    args = [f"--address={address}", f"--node-ip-address={LOOPBACK_IP}", f"--num-cpus={cpus}",
            f"--object-store-memory={object_store_mb * 1024 * 1024}", "--disable-usage-stats"]
    log = log_dir / f"palaestra-worker-{secrets.token_hex(3)}.log"
    return _start(args, log, dict(env or {}), address, False, timeout_s)
