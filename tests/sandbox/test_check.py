"""``palaestra sandbox check PROVIDER`` prints pass/fail per property from real sandboxes, and fails the
properties a provider does not give; downloads refuse symlinks and special files in every provider (the
container kinds once followed them); a memory bomb under gVisor, which ends the whole sandbox, is reported
as ``oom`` (docker's exec client used to wait for its timeout instead), and the dead sandbox then raises
a ``SandboxError`` with the ``oom`` reason rather than answering as if a program had failed."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from sandbox_helpers import Target, make_target, provider_id
from typer.testing import CliRunner

from palaestra.cli.main import app
from palaestra.sandbox import SandboxError

PROPERTIES = ["create", "exec", "files", "ordinary programs", "timeout", "process limit", "network none",
              "host files hidden", "close", "memory limit", "cleanup"]
BOMB = "b=[]\nwhile True: b.append(bytearray(16 << 20))\n"


def _check(provider: str) -> tuple[int, dict[str, dict[str, object]]]:
    result = CliRunner().invoke(app, ["sandbox", "check", provider, "--json"])
    report = json.loads(result.output[result.output.index("{"):])
    assert report["provider"] == provider
    return result.exit_code, {c["name"]: c for c in report["checks"]}


def test_check_passes_every_property_of_the_process_provider() -> None:
    code, checks = _check("process")
    failed = {n: c["detail"] for n, c in checks.items() if not c["passed"]}
    assert code == 0 and not failed, failed
    assert list(checks) == PROPERTIES
    assert "reported as oom" in str(checks["memory limit"]["detail"])


def test_check_fails_what_the_none_provider_does_not_isolate() -> None:
    """``none`` isolates nothing: the probe must say so (exit 1), property by property, not pass it."""
    code, checks = _check("none")
    assert code == 1
    for name in ("network none", "host files hidden", "memory limit"):
        assert not checks[name]["passed"], checks[name]
    for name in ("create", "exec", "files", "timeout", "close"):
        assert checks[name]["passed"], checks[name]
    assert "127.0.0.1" in str(checks["network none"]["detail"])


def test_check_names_an_unusable_provider() -> None:
    result = CliRunner().invoke(app, ["sandbox", "check", "no-such-provider"])
    assert result.exit_code == 2 and "unknown sandbox provider" in result.output


async def test_download_refuses_symlinks_and_special_files(target: Target) -> None:
    async with await target.provider.create(target.spec()) as box:
        await box.exec(["/bin/sh", "-c", "ln -s /etc/passwd leak; ln -s /etc linkdir; mkfifo fifo; echo ok > f"])
        with pytest.raises(ValueError, match="symlink"):
            await box.download("leak")
        with pytest.raises(ValueError, match="symlink"):
            await box.download("linkdir/passwd")
        with pytest.raises(ValueError, match="regular"):
            await asyncio.wait_for(box.download("fifo"), 30)
        assert await box.download("f") == b"ok\n"


@pytest.fixture(params=["gvisor", "docker?runtime=runsc", "podman?runtime=runsc"], ids=provider_id)
def gvisor_target(request: pytest.FixtureRequest) -> Target:
    return make_target(request.param, request)


async def test_gvisor_memory_bomb_is_reported_as_oom(gvisor_target: Target, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the user's directory: the engine's helpers must leave nothing there
    target = gvisor_target
    async with await target.provider.create(target.spec(memory_mb=64)) as box:
        started = time.monotonic()
        result = await box.exec([target.python, "-c", BOMB], timeout=120)
        took = time.monotonic() - started
        assert result.failure == "oom", result.summary(400)
        assert not result.ok and "64 MB" in result.detail
        assert took < 100, f"the bomb was noticed only after {took:.0f} s (the exec's timeout is 120 s)"
        with pytest.raises(SandboxError, match="out of memory") as err:
            await box.exec(["/bin/true"])
        assert err.value.reason == "oom" and err.value.kind == "sandbox"
    assert not os.listdir(tmp_path)  # podman's conmon wrote an empty `oom` file into its working directory


async def test_gvisor_memory_bomb_is_oom_when_the_exec_client_returns_first(
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race CI met under podman: the exec client came back by itself (exit 128, "WaitPID failed: EOF")
    before the container's cgroup went, and the cgroup's counters no longer showed the OOM kill, so the bomb
    read as a program's exit 128. With the cgroup watcher and the counters both blinded, the engine's own
    state must still make it ``oom`` (podman's client returns when gVisor dies; docker's waits for its
    timeout, which the watcher covers)."""
    from palaestra.sandbox.cgroups import BoxCgroups
    from palaestra.sandbox.docker_box import DockerSandbox

    async def watcher_misses(self: DockerSandbox, run: object) -> bool:
        return False

    monkeypatch.setattr(DockerSandbox, "_container_ended", watcher_misses)
    monkeypatch.setattr(BoxCgroups, "counters", lambda self: {"oom": 0, "pids": 0})
    target = make_target("podman?runtime=runsc", request)
    async with await target.provider.create(target.spec(memory_mb=64)) as box:
        result = await box.exec([target.python, "-c", BOMB], timeout=120)
        assert result.failure == "oom", result.summary(400)
        with pytest.raises(SandboxError, match="out of memory"):
            await box.exec(["/bin/true"])
