"""The test image and the test dockerd.

The image is the local base image (:mod:`palaestra.sandbox.baseimage`: busybox, bash, GNU find and the
system Python from this machine's packages) under the tag the tests have always used, imported into docker
or podman once and found by tag afterwards (nothing can be pulled here).

The daemon is a dockerd started for the tests when none answers (``--bridge=none --iptables=false``: this
machine must not touch any network beyond loopback), with gVisor's ``runsc`` registered as a runtime when it
is installed (``--network=none``: gVisor refuses to start networking in the host's namespace), and stopped
again afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence

from palaestra.sandbox.baseimage import build_tar
from palaestra.sandbox.baseimage import ensure_image as _ensure_image

IMAGE = "palaestra-test-rootfs:4"
_CONFIG = "/tmp/palaestra-test-dockerd.json"
__all__ = ["IMAGE", "Daemon", "build_tar", "docker_ok", "ensure_image"]


def docker_ok() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                          timeout=10).returncode == 0


def docker_runtimes() -> str:
    proc = subprocess.run(["docker", "info", "--format", "{{json .Runtimes}}"], capture_output=True, text=True,
                          timeout=20)
    return proc.stdout if proc.returncode == 0 else ""


class Daemon:
    """A dockerd started for the tests (or None when one already answers, or none can start)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.reason = ""

    def start(self, timeout: float = 30.0) -> bool:
        if docker_ok():
            return True
        if self.proc is not None:
            self.stop()
        dockerd = shutil.which("dockerd")
        if not dockerd or not shutil.which("docker"):
            self.reason = "docker.io is not installed (run .ci/setup-sandbox.sh)"
            return False
        if os.geteuid() != 0:
            self.reason = "dockerd needs root here"
            return False
        runtimes = {}
        runsc = shutil.which("runsc")
        if runsc:
            runtimes["runsc"] = {"path": runsc, "runtimeArgs": ["--network=none"]}
        with open(_CONFIG, "w") as fh:
            json.dump({"runtimes": runtimes}, fh)
        log = open("/tmp/palaestra-test-dockerd.log", "ab")
        self.proc = subprocess.Popen([dockerd, "--config-file", _CONFIG, "--bridge=none", "--iptables=false",
                                      "--ip6tables=false", "--ip-masq=false", "--pidfile",
                                      "/tmp/palaestra-test-dockerd.pid"],
                                     stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.reason = f"dockerd exited with {self.proc.returncode} (see /tmp/palaestra-test-dockerd.log)"
                return False
            if docker_ok():
                return True
            time.sleep(0.2)
        self.reason = "dockerd did not answer within 30 s"
        self.stop()
        return False

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink("/tmp/palaestra-test-dockerd.pid")
        self.proc = None


def ensure_image(engine: Sequence[str] = ("docker",)) -> str:
    """Import the test image into ``engine`` once; later runs find it by tag. Raises when the import fails
    (the callers turn that into a test failure: an engine that runs but cannot import is broken)."""
    return _ensure_image(list(engine), IMAGE)[0]
