"""Provider x environment: ``env check`` of every sandboxed built-in environment under every sandbox
provider this machine has. The reference solution of every bundled task must get full reward and the
null policy none, whichever provider runs the code (one slow cell checks the first tasks only).

This is the matrix that would have caught ``code`` under ``process`` scoring 0 on 24 of 24 references
(Landlock denied ``/dev/null``): each provider's own tests passed, and no environment ran on it.
A cell is skipped only where its provider's binary is not installed (docker: where no engine starts)."""


from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox"))

from sandbox_rootfs import Daemon, ensure_image

from palaestra.core.environment import Environment
from palaestra.envs.code.env import CodeEnv
from palaestra.envs.terminal.env import Terminal
from palaestra.rollout.conformance import CheckReport, check_env
from palaestra.sandbox import SandboxProvider, available_providers, get_provider
from palaestra.sandbox.apptainer import ApptainerProvider
from palaestra.sandbox.docker import DockerProvider
from palaestra.sandbox.gvisor import GvisorProvider
from palaestra.sandbox.podman import PodmanProvider, podman_engine

ENVS: dict[str, type[Environment]] = {"code": CodeEnv, "terminal": Terminal}
PROVIDERS = ["local", "process", "none", "docker", "podman", "gvisor", "apptainer"]
BINARIES = {"local": "bwrap", "docker": "docker", "podman": "podman", "gvisor": "runsc", "apptainer": "apptainer"}
CAPABILITY = {"runsc": "gvisor"}  # the capability a missing binary's skip names
IMAGE_VARS = {"apptainer": "PALAESTRA_TEST_APPTAINER_IMAGE"}
# Every cell checks every bundled task, except where that costs over a minute on a 2-core machine:
# terminal under docker makes two containers and a dozen `docker exec`s per rollout (~90 s for all 24); podman
# and gVisor cost the same per exec or more, so their cells check a sample too (CI time: issue 24's budget).
CELL_LIMITS = {("terminal", "docker"): 8, ("terminal", "podman"): 3, ("terminal", "gvisor"): 3,
               ("code", "podman"): 8, ("code", "gvisor"): 8}


@pytest.fixture(scope="module")
def docker_engine() -> Iterator[Daemon]:
    daemon = Daemon()
    yield daemon
    daemon.stop()


def _provider(name: str, request: pytest.FixtureRequest) -> SandboxProvider:
    binary = BINARIES.get(name)
    if binary and not shutil.which(binary) and not (name == "apptainer" and shutil.which("singularity")):
        pytest.skip(f"{CAPABILITY.get(binary, name)}: {binary} is not installed")
    if name == "docker":
        daemon: Daemon = request.getfixturevalue("docker_engine")
        if not daemon.start():
            pytest.skip(f"docker: no engine can start here ({daemon.reason})")
        # an explicit default image: the bundled tasks name none, and nothing may be pulled
        return DockerProvider(image=_image(["docker"]), pull="never")
    if name == "podman":
        return PodmanProvider(image=_image(podman_engine()), pull="never")
    if name == "gvisor":
        ok, why = available_providers()[name]
        assert ok, f"runsc is installed but the gvisor provider is not usable here: {why}"
        return GvisorProvider()  # the local base image, unpacked once
    if name in IMAGE_VARS:
        image = os.environ.get(IMAGE_VARS[name])
        if not image:
            pytest.skip(f"{name}: set {IMAGE_VARS[name]} to an image with python3 and bash to test it")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return ApptainerProvider(image=image)
    ok, why = available_providers()[name]
    assert ok, f"{name} is installed but not usable here: {why}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # process and none warn by design
        return get_provider(name)


def _image(engine: list[str]) -> str:
    """The test image in ``engine``: an engine that runs but cannot import it fails the cell."""
    try:
        return ensure_image(engine)
    except Exception as exc:
        pytest.fail(f"{engine[0]} runs but the test image could not be imported: {exc}")


def _check(report: CheckReport, name: str) -> tuple[bool, str]:
    found = [r for r in report.results if r.name.startswith(name)]
    assert found, f"env check has no '{name}' result: {[r.name for r in report.results]}"
    return found[0].ok, found[0].detail


@pytest.mark.parametrize("provider_name", PROVIDERS)
@pytest.mark.parametrize("env_name", sorted(ENVS))
def test_reference_solutions_get_full_reward(env_name: str, provider_name: str,
                                             request: pytest.FixtureRequest) -> None:
    provider = _provider(provider_name, request)
    try:
        env = ENVS[env_name](sandbox=provider)  # type: ignore[call-arg]
        limit = CELL_LIMITS.get((env_name, provider_name))
        report = asyncio.run(check_env(env, "inprocess", limit))  # type: ignore[arg-type]
    finally:
        if isinstance(provider, DockerProvider):
            with contextlib.suppress(Exception):
                provider.cleanup(include_live=True)
    total = len(ENVS[env_name]().examples())
    assert report.tasks == min(total, limit or total) and report.tasks > 0
    ok, detail = _check(report, "oracle")
    assert ok, f"{env_name} under {provider_name}: the reference solutions did not all get full reward: {detail}"
    ok, detail = _check(report, "null")
    assert ok, f"{env_name} under {provider_name}: the null policy scored: {detail}"
