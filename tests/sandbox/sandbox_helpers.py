"""Helpers shared by the sandbox tests (a module of its own: test files import it by name)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from palaestra.sandbox import SandboxSpec
from palaestra.sandbox.base import SandboxProvider
from palaestra.sandbox.registry import Registry, owner_fields


@dataclass
class Target:
    provider: SandboxProvider
    name: str
    image: str | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def spec(self, **kw: object) -> SandboxSpec:
        kw.setdefault("labels", {"run_id": "pytest", "rollout_id": f"t-{os.getpid()}"})
        if self.image:
            kw.setdefault("image", self.image)
        return SandboxSpec(**kw)  # type: ignore[arg-type]

    @property
    def python(self) -> str:
        return "python3" if self.image else str(getattr(self.provider, "python", "python3"))


class Listener:
    """A TCP listener on 127.0.0.1 that counts accepted connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@dataclass
class Netns:
    name: str
    addr: str
    port: int
    hits_file: Path
    proc: subprocess.Popen[bytes]

    def hits(self) -> int:
        try:
            return len(self.hits_file.read_text().splitlines())
        except FileNotFoundError:
            return 0


def procs_with(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                    found.append(int(name))
            except OSError:
                continue
    return found


def own_leftovers() -> list[str]:
    """Sandboxes, uid claims and cgroups this test process still holds."""
    me = owner_fields()["owner_pid"]
    reg = Registry()
    found = [f"record {r['id']}" for r in reg.records() if r.get("owner_pid") == me]
    found += [f"uid {u}" for u, c in reg.uid_claims() if c.get("owner_pid") == me]
    if shutil.which("docker"):
        owner = f"label=palaestra.owner={me}:{owner_fields()['owner_start']}"
        ps = subprocess.run(["docker", "ps", "-a", "--filter", owner, "--format", "{{.Names}}"],
                            capture_output=True, text=True)
        found += [f"container {n}" for n in ps.stdout.split()]
    return found
