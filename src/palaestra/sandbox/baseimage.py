"""The local base image: a small root filesystem made from this machine's own Debian packages, because no
image registry may be reached during a run (and often none can be).

It holds busybox (``busybox-static``) for the shell tools, GNU bash and find over busybox's applets of the
same name (agents and task tests write bash and ``find -delete``), and the system Python with its standard
library and shared libraries. Built in memory as a tar (about 50 MB, under a second), then either imported
into a container engine (``docker import`` / ``podman import``, cached by tag) or unpacked into a directory
for the ``gvisor`` provider (cached by a marker file). ``palaestra sandbox image build`` runs it.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path

from palaestra.sandbox.types import SandboxError

BASE_IMAGE = "palaestra-base:1"
_PY = "/usr/bin/python3"
_GNU = ("/usr/bin/bash", "/usr/bin/find")
_SKIP = {"test", "__pycache__", "idlelib", "tkinter", "ensurepip", "lib2to3", "turtledemo", "pydoc_data",
         "site-packages", "dist-packages"}
_ETC = (("etc/passwd", "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n"),
        ("etc/group", "root:x:0:\nnogroup:x:65534:\n"))


def _libs(binary: str) -> set[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    return {p for p in re.findall(r"(/\S+\.so[\.\d]*)", out) if os.path.exists(p)}


def _filter(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if set(Path(info.name).parts) & _SKIP:
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    tar.addfile(info)


def build_tar() -> bytes:
    """The root filesystem as an uncompressed tar, in memory."""
    if not os.path.exists("/bin/busybox") or not os.path.exists(_PY):
        raise SandboxError("the local base image needs /bin/busybox and /usr/bin/python3",
                           hint="install them: apt-get install busybox-static python3")
    real_py = os.path.realpath(_PY)
    version = Path(real_py).name  # python3.11
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("bin", "tmp", "workspace", "etc", "proc", "dev", "sys", "usr/bin", "usr/lib"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        tar.add("/bin/busybox", "bin/busybox", filter=_filter)
        gnu = [tool for tool in _GNU if os.path.exists(tool)]
        replaced = {os.path.basename(tool) for tool in gnu}
        applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True).stdout.split()
        for name in applets:
            if name != "busybox" and name not in replaced:
                _link(tar, f"bin/{name}", "busybox")
        tar.add(real_py, f"usr/bin/{version}", filter=_filter)
        for alias in ("python3", "python"):
            _link(tar, f"usr/bin/{alias}", version)
        for tool in gnu:
            tar.add(os.path.realpath(tool), tool.lstrip("/"), filter=_filter)
            _link(tar, f"bin/{os.path.basename(tool)}", tool)
        for lib in sorted(_libs(real_py).union(*map(_libs, gnu))):
            tar.add(os.path.realpath(lib), lib.lstrip("/"), filter=_filter)
        stdlib = f"/usr/lib/{version}"
        tar.add(stdlib, stdlib.lstrip("/"), filter=_filter)
        for name, text in _ETC:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def has_image(engine: Sequence[str], tag: str) -> bool:
    return subprocess.run([*engine, "image", "inspect", tag], capture_output=True, timeout=60).returncode == 0


def ensure_image(engine: Sequence[str], tag: str = BASE_IMAGE) -> tuple[str, bool]:
    """Import the base image into ``engine`` (``["docker"]``, or podman with its flags) unless it has
    ``tag`` already. Returns (tag, built now?); raises SandboxError with the engine's message."""
    if has_image(engine, tag):
        return tag, False
    proc = subprocess.run([*engine, "import", "-", tag], input=build_tar(), capture_output=True, timeout=300)
    if proc.returncode != 0:
        raise SandboxError(f"`{engine[0]} import` of the base image failed: "
                           f"{proc.stderr.decode(errors='replace').strip()[:500]}",
                           hint=f"check the engine (`{engine[0]} info`)")
    return tag, True


def ensure_rootfs(root: Path) -> tuple[Path, bool]:
    """The base image unpacked under ``root`` (cached: a ``.complete`` marker is written last, so a build
    that died halfway is redone). Returns (directory, built now?)."""
    done = root / ".complete"
    if done.exists():
        return root, False
    if root.exists():
        shutil.rmtree(root)
    tmp = root.with_name(f"{root.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(build_tar())) as tar:
        # our own tar, modes kept as built (/tmp 1777); older Pythons have no filter argument
        kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
        tar.extractall(tmp, **kw)  # type: ignore[arg-type]
    try:
        os.rename(tmp, root)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
        return root, False
    done.write_text(BASE_IMAGE)
    return root, True
