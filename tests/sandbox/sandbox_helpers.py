"""Helpers shared by the sandbox tests (a module of its own: test files import it by name)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sandbox_rootfs import docker_runtimes

from palaestra.sandbox import SandboxSpec, available_providers, get_provider
from palaestra.sandbox.base import SandboxProvider
from palaestra.sandbox.podman import podman_engine
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
    owner = f"label=palaestra.owner={me}:{owner_fields()['owner_start']}"
    for engine in (["docker"], podman_engine()):
        if shutil.which(engine[0]):
            ps = subprocess.run([*engine, "ps", "-a", "--filter", owner, "--format", "{{.Names}}"],
                                capture_output=True, text=True)
            found += [f"{engine[0]} container {n}" for n in ps.stdout.split()]
    found += [f"runsc container {n}" for n in runsc_containers(reg)]
    return found


def runsc_containers(reg: Registry | None = None) -> list[str]:
    """The containers under the gvisor provider's runsc state directory."""
    state = (reg or Registry()).root / "runsc"
    if not shutil.which("runsc") or not state.is_dir():
        return []
    out = subprocess.run(["runsc", "--root", str(state), "list", "--format", "json"], capture_output=True,
                         text=True)
    try:
        return [str(c.get("id")) for c in json.loads(out.stdout or "[]") or []]
    except ValueError:
        return []


def containers_named(provider: SandboxProvider, name: str) -> list[str]:
    """Containers (running or not) of ``provider``'s engine with ``name``."""
    if provider.name == "gvisor":
        return [c for c in runsc_containers() if c == name]
    engine = list(getattr(provider, "engine", ["docker"]))
    out = subprocess.run([*engine, "ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}"],
                         capture_output=True, text=True)
    return out.stdout.split()


# Provider specs as get_provider takes them: docker and podman also under gVisor (runtime=runsc), and gVisor
# standalone. Every one runs wherever its tools are installed; only apptainer needs an image named for it.
PROVIDERS = ["local", "process", "docker", "docker?runtime=runsc", "podman", "podman?runtime=runsc", "gvisor",
             "apptainer"]
IMAGE_VARS = {"apptainer": "PALAESTRA_TEST_APPTAINER_IMAGE"}


def provider_id(spec: str) -> str:
    return spec.replace("?runtime=runsc", "-gvisor")


def need_runsc() -> None:
    if not shutil.which("runsc"):
        pytest.skip("gvisor: runsc is not installed (.ci/setup-sandbox.sh installs it)")


def make_target(name: str, request: pytest.FixtureRequest) -> Target:
    """The target for a provider spec, or a skip naming the missing capability."""
    engine, _, runtime = name.partition("?runtime=")
    if runtime or engine == "gvisor":
        need_runsc()
    if engine == "docker":
        image = request.getfixturevalue("docker_image")  # starts the engine first
        if runtime and '"runsc"' not in docker_runtimes():
            pytest.skip("gvisor: the running dockerd has no runsc runtime (the tests' own daemon registers it)")
        return Target(get_provider(name), name, image)
    if engine == "podman":
        return Target(get_provider(name), name, request.getfixturevalue("podman_image"))
    ok, why = available_providers()[engine]
    if engine == "gvisor":
        assert ok, f"runsc is installed but the gvisor provider is not usable here: {why}"
        return Target(get_provider(name), name)
    if not ok:
        pytest.skip(f"{name}: {why}")
    if name in IMAGE_VARS:
        image = os.environ.get(IMAGE_VARS[name])
        if not image:
            pytest.skip(f"{name}: set {IMAGE_VARS[name]} to an image with python3 to test it")
        return Target(get_provider(name), name, image)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the process provider's warning has its own test
        provider = get_provider(name)
    return Target(provider, name)
