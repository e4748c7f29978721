"""``palaestra sandbox list`` names every provider NeMo Gym lists and every one of ours, each usable here
or unavailable with its reason; ``palaestra sandbox image build`` makes the local base image once; the
``runtime`` option of docker and podman is checked when the provider is made, not at the first run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from palaestra.cli.main import app
from palaestra.sandbox import SandboxError, available_providers, get_provider
from palaestra.sandbox.baseimage import ensure_image, ensure_rootfs
from palaestra.sandbox.catalogue import NEMO_GYM
from palaestra.sandbox.podman import PodmanProvider, podman_engine
from palaestra.sandbox.registry import Registry

OURS = ("local", "process", "bwrap", "docker", "podman", "gvisor", "docker-gvisor", "podman-gvisor")


def test_list_names_every_provider_with_a_reason() -> None:
    result = CliRunner().invoke(app, ["sandbox", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert set(NEMO_GYM) | set(OURS) <= set(rows)
    probed = available_providers()
    for name, row in rows.items():
        assert isinstance(row["available"], bool) and row["reason"].strip(), row
        if name in probed:  # our providers: the probe's own verdict, not a guess
            assert (row["available"], row["reason"]) == probed[name]
        if not row["palaestra"]:  # nothing without a provider may claim to work
            assert not row["available"] and row["enable"], row
    assert rows["docker"]["nemo_gym"] and rows["apptainer"]["nemo_gym"] and not rows["local"]["nemo_gym"]
    if not shutil.which("runsc"):
        assert "runsc" in rows["gvisor"]["reason"] and not rows["docker-gvisor"]["available"]
    text = CliRunner().invoke(app, ["sandbox", "list"]).output
    assert all(name in text for name in rows)


def test_base_rootfs_is_built_once(tmp_path: Path) -> None:
    if not os.path.exists("/bin/busybox"):
        pytest.skip("busybox: busybox-static is not installed (.ci/setup-sandbox.sh installs it)")
    root, built = ensure_rootfs(tmp_path / "rootfs")
    assert built and (root / "bin" / "sh").exists() and (root / "usr" / "bin" / "python3").exists()
    assert os.stat(root / "tmp").st_mode & 0o1777 == 0o1777
    marker = (root / ".complete").stat().st_mtime_ns
    assert ensure_rootfs(root) == (root, False)
    assert (root / ".complete").stat().st_mtime_ns == marker


def test_podman_image_build_is_cached() -> None:
    if not shutil.which("podman"):
        pytest.skip("podman: podman is not installed (.ci/setup-sandbox.sh installs it)")
    engine = podman_engine()
    tag = f"palaestra-test-build-{os.getpid()}:1"
    try:
        assert ensure_image(engine, tag) == (tag, True)
        assert ensure_image(engine, tag) == (tag, False)
        out = subprocess.run([*engine, "run", "--rm", "--network", "none", "--ulimit", "nofile=256:256",
                              "--ulimit", "nproc=256:256", tag, "python3", "-c", "print(6 * 7)"],
                             capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == "42", out.stderr
    finally:
        subprocess.run([*engine, "rmi", "-f", tag], capture_output=True)


def test_podman_states_what_it_needs(tmp_path: Path) -> None:
    if not shutil.which("podman"):
        pytest.skip("podman: podman is not installed (.ci/setup-sandbox.sh installs it)")
    info = PodmanProvider(Registry(tmp_path), reap=False).describe()
    assert info["available"], info
    assert info["cgroup manager"] in ("cgroupfs", "systemd") and "nproc" in info["ulimits"]
    assert f"--cgroup-manager={info['cgroup manager']}" in info["binary"]


def test_runtime_option_is_checked_up_front() -> None:
    with pytest.raises(SandboxError, match="unknown option|takes no option|option"):
        get_provider("local?runtime=runsc")
    if available_providers()["podman"][0]:
        with pytest.raises(SandboxError, match="unknown OCI runtime"):
            get_provider("podman?runtime=kata")
