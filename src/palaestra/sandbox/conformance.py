"""A short conformance probe of one provider on this machine: ``palaestra sandbox check PROVIDER``.

The full conformance suite lives in ``tests/sandbox`` and needs pytest, fixtures and minutes; a user who
wants to know whether *their* machine gives a provider its properties needs one command and a table. So
this runs the contract's main properties against real sandboxes of the provider, each as one small check
that says pass or fail and why: create, exec (stdout, stderr, exit code, stdin), files (upload/download,
tar round trip, symlinks refused), ordinary programs (``/dev/null``, temp files, subprocesses), a timeout
that kills the tree, limits (memory, processes), no network (a listener on the host's loopback gets no
connection), host files out of sight, and close/cleanup leaving nothing behind.

A check that fails is a property this provider does not give here; a sandbox that cannot even be created
is one failed ``create`` row (the others are not run), never an exception out of the probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
import tarfile
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from palaestra.sandbox.base import Sandbox, SandboxProvider
from palaestra.sandbox.registry import Registry
from palaestra.sandbox.types import SandboxError, SandboxSpec


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Listener:
    """A TCP listener on the host's 127.0.0.1 that counts connections (what a sandbox must not reach)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.hits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


_CONNECT = ("import socket,sys\ntry:\n socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3)\n"
            " print('connected')\nexcept OSError as e:\n print('refused', type(e).__name__)\n")
_SPAWN = ("import subprocess\nn=0\nps=[]\nfor i in range(400):\n try:\n  ps.append(subprocess.Popen(['sleep','20']))\n"
          "  n+=1\n except OSError:\n  break\nprint(n)\nfor p in ps: p.kill()\n")
# bounded (512 MB, 8x the limit) so a provider without limits fails the check without hurting the host
_BOMB = "b=[]\nfor i in range(32): b.append(bytearray(16 << 20))\n"


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o640
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("link")
        link.type, link.linkname = tarfile.SYMTYPE, "a.txt"
        tar.addfile(link)
    return buf.getvalue()


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


class Probe:
    """The checks, run in order against ``provider``; ``image`` for the container kinds, ``python`` the
    interpreter a sandbox of this provider runs (``python3`` in an image, the host's otherwise)."""

    def __init__(self, provider: SandboxProvider, *, image: str | None = None, python: str = "python3") -> None:
        self.provider = provider
        self.image = image
        self.python = python
        self.results: list[Check] = []

    def spec(self, **kw: Any) -> SandboxSpec:
        kw.setdefault("labels", {"run_id": "sandbox-check"})
        return SandboxSpec(image=self.image, **kw)

    async def _run(self, name: str, fn: Callable[[], Awaitable[str]]) -> bool:
        t = time.perf_counter()
        try:
            detail, ok = await fn(), True
        except AssertionError as exc:
            detail, ok = str(exc) or "assertion failed", False
        except Exception as exc:  # a check reports, never raises: the table is the product
            detail, ok = f"{type(exc).__name__}: {exc}"[:300], False
        self.results.append(Check(name, ok, " ".join(detail.split()), round(time.perf_counter() - t, 3)))
        return ok

    async def run(self) -> list[Check]:
        box: Sandbox | None = None

        async def create() -> str:
            nonlocal box
            box = await self.provider.create(self.spec(memory_mb=256, pids=64))
            status = await box.status()
            assert status.state == "running", f"state {status.state} after create"
            return f"{box.id} running"

        if not await self._run("create", create):
            return self.results
        assert box is not None
        try:
            await self._on(box)
        finally:
            await self._run("close", lambda: self._close(box))
        await self._run("memory limit", self._memory)
        await self._run("cleanup", self._cleanup)
        return self.results

    async def _on(self, box: Sandbox) -> None:
        async def exec_() -> str:
            r = await box.exec(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"], timeout=30)
            assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n"), f"got {r.summary(200)}"
            s = await box.exec(["cat"], stdin=b"through stdin", timeout=30)
            assert s.ok and s.stdout == "through stdin", f"stdin: {s.summary(200)}"
            return "stdout, stderr, exit code 3, stdin"

        async def files() -> str:
            await box.upload("dir/a.txt", b"\x00\x01payload")
            assert await box.download("dir/a.txt") == b"\x00\x01payload", "download differs from upload"
            await box.upload_tar(_tar({"a.txt": b"from tar"}), "t")
            back = await box.download_dir("t")
            assert back.get("a.txt") == b"from tar" and "link" not in back, f"tar round trip: {sorted(back)}"
            with contextlib.suppress(ValueError, SandboxError):
                await box.download("t/link")
                raise AssertionError("a symlink was followed by download")
            return "upload, download, tar round trip, symlink refused"

        async def programs() -> str:
            script = ('echo x > /dev/null && t=$(mktemp) && echo hi > "$t" && cat "$t" && rm "$t" && '
                      'sh -c "echo nested"')
            r = await box.exec(["/bin/sh", "-c", script], timeout=30)
            assert r.ok and r.stdout.split() == ["hi", "nested"], f"got {r.summary(300)}"
            p = await box.exec([self.python, "-c", "import os, tempfile; print(os.getpid() > 0)"], timeout=60)
            assert p.ok and p.stdout.strip() == "True", f"{self.python}: {p.summary(300)}"
            return f"/dev/null, mktemp, subprocess, {self.python}"

        async def timeout() -> str:
            # a background child that would write a file 3 s later must die with the exec at 1 s
            late = box.resolve("late.txt")
            t = time.monotonic()
            r = await box.exec(["/bin/sh", "-c", f"(sleep 3; echo late > {late}) & sleep 60"], timeout=1)
            took = time.monotonic() - t
            assert r.failure == "timeout", f"a 1 s timeout gave {r.summary(200)}"
            assert took < 30, f"the timeout took {took:.1f} s to return"
            await asyncio.sleep(max(0.0, 3.5 - took))
            left = await box.exec(["/bin/sh", "-c", f"cat {late} 2>/dev/null || echo none"], timeout=30)
            assert left.stdout.strip() == "none", "a background child outlived the timeout"
            return f"tree killed after 1 s, returned in {took:.1f} s"

        async def pids() -> str:
            r = await box.exec([self.python, "-c", _SPAWN], timeout=60)
            started = int(r.stdout.strip() or 0) if r.stdout.strip().isdigit() else -1
            assert 0 <= started < 400, f"pids=64 let {started} processes start ({r.summary(200)})"
            return f"pids=64 stopped the program at {started} processes"

        async def network() -> str:
            listener = _Listener()
            try:
                r = await box.exec([self.python, "-c", _CONNECT, str(listener.port)], timeout=30)
                await asyncio.sleep(0.3)
                assert listener.hits == 0 and "connected" not in r.stdout.split(), \
                    f"the sandbox reached the host's 127.0.0.1:{listener.port} ({r.stdout.strip()})"
            finally:
                listener.close()
            return f"host loopback unreachable ({r.stdout.strip() or r.stderr.strip()[:80]})"

        async def host_files() -> str:
            with tempfile.TemporaryDirectory(prefix="palaestra-check-") as d:
                secret = os.path.join(d, "secret")
                _write(secret, "host-secret-marker")
                r = await box.exec(["/bin/sh", "-c", f"cat {secret}; cat /etc/shadow"], timeout=30)
            assert "host-secret-marker" not in r.stdout and "root:" not in r.stdout, "host files readable"
            return "a host temp file and /etc/shadow unreadable"

        for name, fn in (("exec", exec_), ("files", files), ("ordinary programs", programs), ("timeout", timeout),
                         ("process limit", pids), ("network none", network), ("host files hidden", host_files)):
            await self._run(name, fn)

    async def _close(self, box: Sandbox) -> str:
        await box.close()
        await box.close()  # idempotent
        assert (await box.status()).state == "closed", "status after close is not closed"
        try:
            await box.exec(["/bin/true"])
        except SandboxError:
            pass
        else:
            raise AssertionError("exec on a closed sandbox did not raise SandboxError")
        registry = getattr(self.provider, "registry", None)
        registry = registry if isinstance(registry, Registry) else Registry()
        left = [r["id"] for r in registry.records() if r.get("id") == box.id]
        assert not left, f"registry still holds {left}"
        return "closed twice, exec refused, no record left"

    async def _memory(self) -> str:
        box = await self.provider.create(self.spec(memory_mb=64, pids=64))
        try:
            try:
                r = await box.exec([self.python, "-c", _BOMB], timeout=60)
            except SandboxError as exc:  # the sandbox itself went down with the bomb: contained, but say so
                assert exc.reason == "oom", f"the memory bomb took the sandbox down without an oom reason: {exc}"
                return f"sandbox ended: {exc.message[:120]}"
            assert not r.ok, "a 64 MB sandbox ran a 512 MB allocation to the end"
            assert r.failure == "oom", f"memory bomb ended as {r.summary(200)}, not reported as oom"
            return f"stopped at 64 MB, reported as oom ({r.detail})"
        finally:
            await box.close()

    async def _cleanup(self) -> str:
        removed = await asyncio.to_thread(self.provider.cleanup)
        return f"reaper ran, removed {removed} leftover(s) of dead runs"


async def probe(provider: SandboxProvider, *, image: str | None = None, python: str = "python3") -> list[Check]:
    return await Probe(provider, image=image, python=python).run()
