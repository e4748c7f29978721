"""A runtime killed with SIGKILL in the middle of an exec leaves a registry record behind (written before
the sandbox existed), and the reaper removes every trace: processes (even a setsid'd grandchild),
the box directory and tmpfs, cgroups, the uid claim, the container (for every provider: docker and podman
with runc and with gVisor, and gVisor standalone, whose sandbox and gofer processes must go as well)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_helpers import Target, containers_named, procs_with

from palaestra.sandbox.registry import Registry

RUNTIME = """
import asyncio, json, sys
from palaestra.sandbox import SandboxSpec, get_provider

CHILD = '''
import os, sys, time
if os.fork() == 0:
    os.setsid()
    time.sleep(300)
time.sleep(300)
'''

async def main():
    name, image, python, marker = sys.argv[1:5]
    provider = get_provider(name)
    box = await provider.create(SandboxSpec(image=image or None, labels={"run_id": "crash-test"}))
    cgroups = getattr(box, "cgroups", None) or getattr(box, "_cg", None)  # containers: their cgroups
    info = {"id": box.id, "uid": getattr(box, "uid", None), "box_dir": getattr(box, "box_dir", None),
            "cgroups": list(getattr(cgroups, "paths", [])),
            "container": getattr(box, "name", None)}
    print(json.dumps(info), flush=True)
    await box.exec([python, "-c", CHILD, marker], timeout=600)

asyncio.run(main())
"""


def _traces(info: dict[str, object]) -> list[str]:
    found = [str(cg) for cg in info["cgroups"] if os.path.exists(str(cg))]  # type: ignore[attr-defined]
    box_dir = info["box_dir"]
    if box_dir and (os.path.lexists(str(box_dir)) or os.path.ismount(str(box_dir))):
        found.append(str(box_dir))
    return found


def _host_processes(target: Target) -> int:
    """Host processes the exec shows with its marker: under gVisor only the ``runsc exec`` client (the
    sandbox's processes live in gVisor's kernel), elsewhere the client and the program too."""
    return 1 if "gvisor" in target.name or "runsc" in target.name else 2


async def test_runtime_killed_mid_exec_then_cleanup(target: Target, tmp_path: Path) -> None:
    marker = f"crash-{os.urandom(4).hex()}"
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.Popen([sys.executable, "-c", RUNTIME, target.name, target.image or "", target.python, marker],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        assert line, proc.stderr.read().decode() if proc.stderr else "runtime printed nothing"
        info = json.loads(line)
        deadline = time.monotonic() + 20
        while len(procs_with(marker)) < _host_processes(target) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert len(procs_with(marker)) >= _host_processes(target), "the exec never started"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    registry = Registry()
    record_path = registry.records_dir / f"{info['id']}.json"
    assert record_path.exists(), "the sandbox was not registered"
    survivors = len(procs_with(marker))

    removed = target.provider.cleanup()
    assert removed >= 1

    deadline = time.monotonic() + 30  # an engine's exec client notices a removed container late under load
    while procs_with(marker) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not procs_with(marker), f"processes survived the reaper ({survivors} were alive after the kill)"
    assert not record_path.exists()
    assert not _traces(info), "leftovers on the host"
    if info["uid"] is not None:
        assert not (registry.uids_dir / str(info["uid"])).exists()
        from palaestra.sandbox.registry import pids_of_uid

        assert not pids_of_uid(info["uid"])
    if info["container"]:
        assert not containers_named(target.provider, info["container"]), "the container survived"
        deadline = time.monotonic() + 30  # a SIGKILLed monitor or exec client is gone once the kernel reaps it
        while procs_with(info["container"]) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not procs_with(info["container"]), "a process naming the container survived"


@pytest.mark.parametrize("name", ["local"])
async def test_cleanup_spares_live_sandboxes(name: str) -> None:
    from palaestra.sandbox import SandboxSpec, get_provider

    provider = get_provider(name)
    box = await provider.create(SandboxSpec())
    try:
        provider.cleanup()
        assert (await box.exec(["true"])).ok
    finally:
        await box.close()


async def test_registered_before_anything_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    """The record is on disk when the first resource is made, and a failed creation leaves nothing."""
    from palaestra.sandbox import SandboxError, SandboxSpec, get_provider
    from palaestra.sandbox.local import LocalProvider

    provider = get_provider("local")
    assert isinstance(provider, LocalProvider)
    seen: list[bool] = []
    original = LocalProvider._materialize

    def spy(self: object, record: dict[str, object], spec: SandboxSpec) -> None:
        seen.append((Registry().records_dir / f"{record['id']}.json").exists())
        original(provider, record, spec)
        raise OSError("disk on fire")

    monkeypatch.setattr(LocalProvider, "_materialize", spy)
    before = {r["id"] for r in Registry().records()}
    with pytest.raises(SandboxError, match="disk on fire"):
        await provider.create(SandboxSpec(labels={"run_id": "fail"}))
    assert seen == [True]
    assert {r["id"] for r in Registry().records()} == before
    assert not any(p.name.startswith("local-") and p.name not in before for p in Registry().boxes_dir.iterdir())
