"""``keep_background``: a server an exec starts in the background is still there for the next exec (a
Harbor agent starts one, its tests probe it later), and by default it dies with the exec that started it.
The exec that started it returns at once, though the background process holds its stdout."""

from __future__ import annotations

import pytest
from sandbox_helpers import Target, make_target, provider_id

from palaestra.sandbox import SandboxSpec

CONTAINERS = ["docker", "docker?runtime=runsc", "podman", "podman?runtime=runsc"]
START = "sleep 300 & echo $!"


@pytest.fixture(params=CONTAINERS, ids=provider_id)
def container(request: pytest.FixtureRequest) -> Target:
    return make_target(request.param, request)


@pytest.mark.parametrize("keep", [True, False], ids=["keep", "default"])
async def test_background_process_outlives_its_exec_only_when_kept(container: Target, keep: bool) -> None:
    spec = SandboxSpec(image=container.image, keep_background=keep, labels={"run_id": "background-test"})
    async with await container.provider.create(spec) as box:
        started = await box.run(START, timeout=60)
        assert started.ok and started.failure is None, started
        pid = started.stdout.strip()
        assert pid.isdigit(), started.stdout
        probe = await box.run(f"kill -0 {pid} && echo alive || echo gone", timeout=60)
        assert probe.stdout.strip() == ("alive" if keep else "gone"), probe
