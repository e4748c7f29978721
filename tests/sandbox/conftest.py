"""Fixtures for the sandbox tests: every provider this machine can run (docker with a daemon the tests
start themselves, podman, both also with gVisor as their runtime, gVisor standalone; the engines get an
image imported from the local base image), a loopback listener and
a listener inside a network namespace the tests create (10.200.x.y, on this machine only), and a final
check that no sandbox, container, uid process or cgroup of this test process is left."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from sandbox_helpers import PROVIDERS, Listener, Netns, Target, make_target, own_leftovers, provider_id
from sandbox_rootfs import Daemon, ensure_image

from palaestra.sandbox import available_providers, get_provider
from palaestra.sandbox.podman import podman_engine


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
    stopped a daemon it had started; then ours starts one again. An engine that runs but cannot import
    the image is broken, which is a failure, not a missing capability."""
    if not docker_daemon.start():
        pytest.skip(f"docker: no engine can start here ({docker_daemon.reason})")
    try:
        return ensure_image()
    except Exception as exc:
        pytest.fail(f"docker runs but the test image could not be imported: {exc}")


@pytest.fixture(scope="session")
def podman_image() -> str:
    if not shutil.which("podman"):
        pytest.skip("podman: podman is not installed (.ci/setup-sandbox.sh installs it)")
    ok, why = available_providers()["podman"]
    assert ok, f"podman is installed but not usable here: {why}"
    try:
        return ensure_image(podman_engine())
    except Exception as exc:
        pytest.fail(f"podman runs but the test image could not be imported: {exc}")


@pytest.fixture(params=PROVIDERS, ids=provider_id)
def target(request: pytest.FixtureRequest) -> Target:
    return make_target(request.param, request)


@pytest.fixture
def loopback() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.close()


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


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind() -> Iterator[None]:
    yield
    leftovers = own_leftovers()
    assert not leftovers, f"sandbox tests left {leftovers}"
