"""The escape suite: the same hostile programs against every provider available here. Each attempt
runs in its own sandbox and counts as contained only when the host shows no trace of it. The test
prints ``contained N of N`` per provider."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from sandbox_helpers import Listener, Netns, Target, procs_with

from palaestra.sandbox import Sandbox

CONNECT = """
import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
    print("CONNECTED")
except OSError as exc:
    print("blocked:", exc)
"""

FORK_BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""

MEMORY_BOMB = """
chunks = []
for i in range(80):
    chunks.append(bytearray(32 << 20))
    for j in range(0, len(chunks[-1]), 4096):
        chunks[-1][j] = 1
print("ALLOCATED", 80 * 32, "MB")
"""

SETSID = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(120)
    os._exit(0)
time.sleep(120)
"""

BIG_OUTPUT = """
import sys
block = b"x" * (1 << 20)
for _ in range(100):
    sys.stdout.buffer.write(block)
"""

LINGER = """
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", sys.argv[1]], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("started")
"""


async def gone(marker: str, within: float = 10.0) -> bool:  # a loaded 2-core CI box is slow to reap
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not procs_with(marker):
            return True
        await asyncio.sleep(0.05)
    return False


def _remove_existing(paths: list[str]) -> list[str]:
    leaked = [p for p in paths if os.path.exists(p)]
    for p in leaked:
        os.unlink(p)
    return leaked


def _plant_secrets(nonce: str) -> tuple[Path, Path, str]:
    """A world-readable canary under /root, a second file whose name only `ls` could reveal, and the
    first line of /etc/shadow."""
    canary = Path(f"/root/pc-{nonce}")
    unlisted = Path(f"/root/pl-{nonce[::-1]}")
    canary.write_text(f"SECRET-{nonce}\n")
    canary.chmod(0o644)
    unlisted.touch()
    return canary, unlisted, Path("/etc/shadow").read_text().splitlines()[0]


Attempt = Callable[[Target, Sandbox], Awaitable[tuple[bool, str]]]


def attempts(loopback: Listener, netns: Netns | None, nonce: str) -> dict[str, tuple[dict[str, object], Attempt]]:
    async def loopback_port(t: Target, box: Sandbox) -> tuple[bool, str]:
        r = await box.exec([t.python, "-c", CONNECT, "127.0.0.1", str(loopback.port)], timeout=10)
        return loopback.hits == 0 and "CONNECTED" not in r.stdout, r.stdout.strip()

    async def netns_listener(t: Target, box: Sandbox) -> tuple[bool, str]:
        assert netns is not None
        before = netns.hits()
        r = await box.exec([t.python, "-c", CONNECT, netns.addr, str(netns.port)], timeout=10)
        await asyncio.sleep(0.1)
        return netns.hits() == before and "CONNECTED" not in r.stdout, r.stdout.strip()

    async def write_outside(t: Target, box: Sandbox) -> tuple[bool, str]:
        parent = box.resolve(".").rstrip("/").rpartition("/")[0] or "/"
        paths = [f"/etc/pe-{nonce}", f"/tmp/pe-{nonce}", f"/root/pe-{nonce}", f"/usr/pe-{nonce}",
                 f"{parent}/pe-{nonce}", f"/run/pe-{nonce}"]
        script = "; ".join(f"echo pwned > {p} 2>/dev/null" for p in paths)
        await box.exec(["/bin/sh", "-c", script + "; exit 0"], timeout=10)
        leaked = _remove_existing(paths)
        return not leaked, f"host files written: {leaked}" if leaked else "nothing written outside"

    async def read_secrets(t: Target, box: Sandbox) -> tuple[bool, str]:
        canary, unlisted, shadow = _plant_secrets(nonce)
        try:
            r = await box.exec(["/bin/sh", "-c", f"cat /etc/shadow; ls -a /root; cat {canary}; exit 0"], timeout=10)
        finally:
            canary.unlink()
            unlisted.unlink()
        out = r.stdout + r.stderr
        leaked = [w for w in (shadow, f"SECRET-{nonce}", unlisted.name) if w in out]
        return not leaked, f"leaked {leaked}" if leaked else "unreadable"

    async def fork_bomb(t: Target, box: Sandbox) -> tuple[bool, str]:
        start = time.monotonic()
        r = await box.exec([t.python, "-c", FORK_BOMB, f"fb-{nonce}"], timeout=2)
        took = time.monotonic() - start
        clean = await gone(f"fb-{nonce}")
        return clean and took < 20, f"{r.failure or r.exit_code} after {took:.1f} s, leftovers gone: {clean}"

    async def memory_bomb(t: Target, box: Sandbox) -> tuple[bool, str]:
        r = await box.exec([t.python, "-c", MEMORY_BOMB], timeout=20)
        return "ALLOCATED" not in r.stdout and r.exit_code != 0, f"{r.failure} exit {r.exit_code}"

    async def setsid_sleep(t: Target, box: Sandbox) -> tuple[bool, str]:
        start = time.monotonic()
        r = await box.exec([t.python, "-c", SETSID, f"ss-{nonce}"], timeout=1)
        took = time.monotonic() - start
        clean = await gone(f"ss-{nonce}")
        return r.failure == "timeout" and clean and took < 15, f"{r.failure} after {took:.1f} s, gone: {clean}"

    async def big_output(t: Target, box: Sandbox) -> tuple[bool, str]:
        start = time.monotonic()
        r = await box.exec([t.python, "-c", BIG_OUTPUT], timeout=30)
        took = time.monotonic() - start
        capped = len(r.stdout) <= box.spec.output_cap_bytes and r.stdout_truncated
        return capped and took < 25, f"kept {len(r.stdout)} bytes, {r.failure or 'no failure'}, {took:.1f} s"

    async def left_after_close(t: Target, box: Sandbox) -> tuple[bool, str]:
        await box.exec([t.python, "-c", LINGER, f"la-{nonce}"], timeout=10)
        await box.close()
        clean = await gone(f"la-{nonce}")
        return clean, "nothing survived close" if clean else "a process survived close"

    table: dict[str, tuple[dict[str, object], Attempt]] = {
        "connect to a 127.0.0.1 port": ({}, loopback_port),
        "write outside the work dir": ({}, write_outside),
        "read /etc/shadow and /root": ({}, read_secrets),
        "fork bomb": ({"pids": 32}, fork_bomb),
        "memory bomb": ({"memory_mb": 128}, memory_bomb),
        "setsid + sleep past the timeout": ({}, setsid_sleep),
        "100 MB of output": ({"output_kill_bytes": 256 << 20}, big_output),
        "process left running after close": ({}, left_after_close),
    }
    if netns is not None:
        table["connect to a listener in a test netns"] = ({}, netns_listener)
    return table


async def test_escape_suite(target: Target, loopback: Listener, netns: Netns | None,
                            capsys: pytest.CaptureFixture[str]) -> None:
    nonce = os.urandom(4).hex()
    table = attempts(loopback, netns, nonce)

    async def one(label: str, kw: dict[str, object], fn: Attempt) -> tuple[str, bool, str]:
        box = await target.provider.create(target.spec(**kw))
        try:
            ok, detail = await fn(target, box)
        finally:
            await box.close()
        return label, ok, detail

    results = await asyncio.gather(*(one(label, kw, fn) for label, (kw, fn) in table.items()))
    contained = sum(ok for _, ok, _ in results)
    with capsys.disabled():
        print(f"\n[{target.name}] escape suite:")
        for label, ok, detail in results:
            print(f"  {'contained' if ok else 'ESCAPED  '}  {label}: {detail}")
        print(f"[{target.name}] contained {contained} of {len(results)}"
              + ("" if netns is not None else " (no test netns: not root or no `ip`)"))
    assert contained == len(results), [r for r in results if not r[1]]
