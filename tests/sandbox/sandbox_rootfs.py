"""A small root filesystem built from this machine's own files, turned into a container image with
``docker import`` (nothing can be pulled here): busybox for the shell tools, bash and GNU find (agents
and task tests write bash and ``find -delete``, which busybox lacks), the system Python with its
libraries and standard library for the escape attempts. Cached by tag; building takes a few seconds once.

Also starts a Docker daemon for the tests when none runs (``--bridge=none --iptables=false``: this
machine must not touch any network beyond loopback) and stops it again afterwards."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

IMAGE = "palaestra-test-rootfs:4"
_PY = "/usr/bin/python3"
_GNU = ("/usr/bin/bash", "/usr/bin/find")  # over busybox's applets of the same name


def _libs(binary: str) -> set[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    found = set(re.findall(r"(/\S+\.so[\.\d]*)", out))
    return {p for p in found if os.path.exists(p)}


def build_tar() -> bytes:
    """The root filesystem as an uncompressed tar, in memory (~40 MB)."""
    real_py = os.path.realpath(_PY)
    version = Path(real_py).name  # python3.11
    stdlib = Path(f"/usr/lib/{version}")
    buf = io.BytesIO()
    skip = {"test", "__pycache__", "idlelib", "tkinter", "ensurepip", "lib2to3", "turtledemo", "pydoc_data",
            "site-packages", "dist-packages"}

    def filt(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = set(Path(info.name).parts)
        if parts & skip:
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "tmp", "workspace", "etc", "proc", "dev", "sys", "usr/bin", "usr/lib"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        tar.add("/bin/busybox", "bin/busybox", filter=filt)
        gnu = [tool for tool in _GNU if os.path.exists(tool)]
        replaced = {os.path.basename(tool) for tool in gnu}
        applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True).stdout.split()
        for name in applets:
            if name == "busybox" or name in replaced:
                continue
            info = tarfile.TarInfo(f"bin/{name}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
        tar.add(real_py, f"usr/bin/{version}", filter=filt)
        for alias in ("python3", "python"):
            info = tarfile.TarInfo(f"usr/bin/{alias}")
            info.type, info.linkname = tarfile.SYMTYPE, version
            tar.addfile(info)
        for tool in gnu:
            tar.add(os.path.realpath(tool), tool.lstrip("/"), filter=filt)
            info = tarfile.TarInfo(f"bin/{os.path.basename(tool)}")
            info.type, info.linkname = tarfile.SYMTYPE, tool
            tar.addfile(info)
        for lib in sorted(_libs(real_py).union(*map(_libs, gnu))):
            tar.add(os.path.realpath(lib), lib.lstrip("/"), filter=filt)
        tar.add(str(stdlib), str(stdlib).lstrip("/"), filter=filt)
        for name, text in (("etc/passwd", "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n"),
                           ("etc/group", "root:x:0:\nnogroup:x:65534:\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def docker_ok() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                          timeout=10).returncode == 0


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
        log = open("/tmp/palaestra-test-dockerd.log", "ab")
        self.proc = subprocess.Popen([dockerd, "--bridge=none", "--iptables=false", "--ip6tables=false",
                                      "--ip-masq=false", "--pidfile", "/tmp/palaestra-test-dockerd.pid"],
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


def ensure_image() -> str:
    """Import the test image once; later runs find it by tag."""
    have = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True)
    if have.returncode == 0:
        return IMAGE
    proc = subprocess.run(["docker", "import", "-", IMAGE], input=build_tar(), capture_output=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"docker import failed: {proc.stderr.decode(errors='replace')[:500]}")
    return IMAGE
