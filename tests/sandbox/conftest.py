"""Fixtures for the sandbox tests: every provider this machine can run (docker with a daemon the tests
start themselves and an image imported from a locally built root filesystem), a loopback listener and
a listener inside a network namespace the tests create (10.200.x.y, on this machine only), and a final
check that no sandbox, container, uid process or cgroup of this test process is left."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from rootfs import Daemon, ensure_image

from palaestra.sandbox import SandboxSpec, available_providers, get_provider
from palaestra.sandbox.base import SandboxProvider
from palaestra.sandbox.registry import Registry, owner_fields

PROVIDERS = ["local", "process", "docker", "apptainer"]


@pytest.fixture(scope="session")
def docker_daemon() -> Iterator[Daemon]:
    daemon = Daemon()
    yield daemon
    with contextlib.suppress(Exception):
        get_provider("docker").cleanup(include_live=True)
    daemon.stop()


@pytest.fixture
def docker_image(docker_daemon: Daemon) -> str:
    """The engine is checked before every docker test: on a shared machine another test run may have
    stopped a daemon it had started; then ours starts one again."""
    if not docker_daemon.start():
        pytest.skip(f"docker: no engine can start here ({docker_daemon.reason})")
    try:
        return ensure_image()
    except Exception as exc:
        pytest.skip(f"docker: test image could not be imported ({exc})")


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
        return "python3" if self.name == "docker" else str(getattr(self.provider, "python", "python3"))


@pytest.fixture(params=PROVIDERS)
def target(request: pytest.FixtureRequest) -> Target:
    name = request.param
    ok, why = available_providers()[name]
    if name == "docker":
        image = request.getfixturevalue("docker_image")
        return Target(get_provider("docker"), "docker", image)
    if not ok:
        pytest.skip(f"{name}: {why}")
    if name == "apptainer":
        image = os.environ.get("PALAESTRA_TEST_APPTAINER_IMAGE")
        if not image:
            pytest.skip("apptainer: set PALAESTRA_TEST_APPTAINER_IMAGE to a .sif with python3 to test it")
        return Target(get_provider(name), name, image)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the process provider's warning has its own test
        provider = get_provider(name)
    return Target(provider, name)


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


@pytest.fixture
def loopback() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.close()


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


_NS_LISTENER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
while True:
    c, a = s.accept()
    with open(sys.argv[3], "a") as fh:
        fh.write(f"{a[0]}\\n")
    c.close()
"""


@pytest.fixture(scope="session")
def netns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Netns | None]:
    """A listener at 10.200.N.2 in a namespace of our own, reachable from the host over a veth pair."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        yield None
        return
    n = 1 + os.getpid() % 250
    ns, host_if, ns_if = f"palaestra-t{n}", f"pvh{n}", f"pvn{n}"
    host_ip, ns_ip = f"10.200.{n}.1", f"10.200.{n}.2"
    steps = [["ip", "netns", "add", ns], ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
             ["ip", "link", "set", ns_if, "netns", ns], ["ip", "addr", "add", f"{host_ip}/30", "dev", host_if],
             ["ip", "link", "set", host_if, "up"],
             ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if],
             ["ip", "netns", "exec", ns, "ip", "link", "set", ns_if, "up"],
             ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]]

    def teardown() -> None:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)

    teardown()
    for step in steps:
        if subprocess.run(step, capture_output=True).returncode != 0:
            teardown()
            yield None
            return
    hits = tmp_path_factory.mktemp("netns") / "hits"
    port = 18000 + n
    proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", _NS_LISTENER, ns_ip, str(port),
                             str(hits)], stdin=subprocess.DEVNULL)
    ok = False
    for _ in range(100):
        with contextlib.suppress(OSError), socket.create_connection((ns_ip, port), timeout=0.5):
            ok = True  # the control connection: the listener is reachable from the host
            break
        time.sleep(0.05)
    yield Netns(ns, ns_ip, port, hits, proc) if ok else None
    proc.kill()
    proc.wait()
    teardown()


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


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind() -> Iterator[None]:
    yield
    leftovers = own_leftovers()
    assert not leftovers, f"sandbox tests left {leftovers}"
