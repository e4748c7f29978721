"""The docker provider never pulls unless told to (issue 24): a grading run must not reach the internet,
and an image that is not on the machine fails with its name and the command that builds it."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from sandbox_rootfs import Daemon

from palaestra.sandbox import SandboxError, SandboxSpec
from palaestra.sandbox.docker import DockerProvider
from palaestra.sandbox.registry import Registry

ABSENT = "palaestra-test-absent-image:0"


def test_default_pull_policy_is_never(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PALAESTRA_DOCKER_PULL", raising=False)
    provider = DockerProvider(Registry(tmp_path), reap=False)
    assert provider.pull == "never"
    record = {"id": "x", "container": "palaestra-x", "owner_pid": 1, "owner_start": 1, "host": "h"}
    args = provider._run_args(SandboxSpec(image="some:image"), record, "some:image")
    assert args[args.index("--pull") + 1] == "never"
    assert DockerProvider(Registry(tmp_path), reap=False, pull="missing").pull == "missing"
    with pytest.raises(SandboxError, match="pull policy"):
        DockerProvider(Registry(tmp_path), reap=False, pull="sometimes")


def test_missing_image_names_it_and_how_to_build_it(docker_daemon: Daemon, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    if not docker_daemon.start():
        pytest.skip(f"docker: no engine can start here ({docker_daemon.reason})")
    monkeypatch.delenv("PALAESTRA_DOCKER_PULL", raising=False)
    assert subprocess.run(["docker", "image", "inspect", ABSENT], capture_output=True).returncode != 0
    provider = DockerProvider(Registry(tmp_path), reap=False)
    with pytest.raises(SandboxError) as info:
        asyncio.run(provider.create(SandboxSpec(image=ABSENT)))
    err = info.value
    assert err.failure == "sandbox"
    assert ABSENT in err.message and "'never'" in err.message
    assert err.hint is not None and f"docker build -t {ABSENT}" in err.hint and "import" in err.hint
    # nothing was pulled, and no container or record was left behind
    assert subprocess.run(["docker", "image", "inspect", ABSENT], capture_output=True).returncode != 0
    assert not list(provider.registry.records("docker"))
