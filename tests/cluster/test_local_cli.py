"""``palaestra eval run --cluster ray:local``: a private Ray cluster started and stopped by the run itself,
on loopback, with a private token (nothing written to ~/.ray), and resumable like any run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)


def test_eval_run_on_a_private_local_cluster_then_resume(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray: the [ray] extra is not installed")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    ray_tmp = Path(tempfile.mkdtemp(prefix="pal-", dir="/tmp"))  # short: Ray's socket paths are capped
    env.update(HOME=str(home), RAY_TMPDIR=str(ray_tmp))
    try:
        _check(tmp_path, home, env)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _check(tmp_path: Path, home: Path, env: dict[str, str]) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--env", "workplace", "--limit", "6",
           "--model", "scripted:oracle", "--placement", "ray", "--cluster", "ray:local?workers=2&object_store_mb=80",
           "--out", str(out), "-q"]
    code, err = _run(cmd, env, 150)
    assert code == 0, err[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["overall"]["coverage"] == 1.0 and metrics["overall"]["mean_reward"] == 1.0
    assert json.loads((out / "cluster.json").read_text())["workers"] == 2
    assert json.loads((out / "run.json").read_text())["config"]["cluster"].startswith("ray:local")
    assert not (home / ".ray").exists(), "Ray wrote a token into the user's home"
    code, err = _run([sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--resume", str(out), "-q"], env, 60)
    assert code == 0, err[-2000:]
    assert len((out / "rollouts.jsonl").read_text().splitlines()) == 6, "a resumed finished run ran again"


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run in its own session, so a hung run's private Ray cluster is killed with it, not left behind."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"timed out: {err[-2000:]}")
    return proc.returncode, err
