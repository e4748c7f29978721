"""An out-of-tree plugin package (tests/fixtures/plugin_pkg) adds an environment and an agent to
Palaestra by being installed: pip builds and installs it (offline, into a directory of its own), and the
``palaestra`` command then lists it, runs an evaluation on it, and checks it, in subprocesses that see the
package only through that directory. Without the directory the same commands do not know the names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parents[1] / "fixtures" / "plugin_pkg"
CLI = [sys.executable, "-m", "palaestra.cli.main"]
DIST, VERSION = "palaestra-plugin-fixture", "0.3.1"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture package built and installed with pip, offline (no index, no build isolation), into a
    fresh directory. It is built from a copy, so no build output lands in the source tree."""
    root = tmp_path_factory.mktemp("plugin")
    src = root / "src"
    shutil.copytree(FIXTURE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = root / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                           "--no-index", "--disable-pip-version-check", "--quiet", "--target", str(target),
                           str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(target.glob("palaestra_plugin_fixture-*.dist-info")), sorted(p.name for p in target.iterdir())
    return target


def _env(site: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


def _cli(args: list[str], site: Path | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(CLI + args, capture_output=True, text=True, env=_env(site), cwd=cwd, timeout=300)


def test_plugins_lists_the_installed_package_and_where_it_came_from(site: Path, tmp_path: Path) -> None:
    proc = _cli(["plugins", "--json", "--load"], site, tmp_path)
    assert proc.returncode == 0, proc.stderr
    groups = json.loads(proc.stdout)["groups"]
    assert groups["environments"]["entry_point_group"] == "palaestra.environments"
    envs = {p["name"]: p for p in groups["environments"]["plugins"]}
    plugin = envs["reverse_word"]
    assert (plugin["distribution"], plugin["version"]) == (DIST, VERSION)
    assert plugin["target"] == "palaestra_plugin_fixture.env:ReverseWord" and plugin["loads"] is True
    assert envs["mcqa"]["origin"] == "built-in" and envs["mcqa"]["distribution"] is None
    agents = {p["name"]: p for p in groups["agents"]["plugins"]}
    assert agents["fixture-single"]["distribution"] == DIST and agents["tool"]["origin"] == "built-in"
    for group in ("sandboxes", "models", "exporters"):
        assert all(p["origin"] == "built-in" for p in groups[group]["plugins"]), group
    assert {"scripted", "local", "openai"} <= {p["name"] for p in groups["models"]["plugins"]}

    text = _cli(["plugins", "--group", "environments"], site, tmp_path)
    assert text.returncode == 0, text.stderr
    line = next(ln for ln in text.stdout.splitlines() if "reverse_word" in ln)
    assert f"{DIST} {VERSION}" in line and "agents" not in text.stdout

    bare = _cli(["plugins", "--json"], None, tmp_path)
    assert bare.returncode == 0, bare.stderr
    assert "reverse_word" not in {p["name"] for p in json.loads(bare.stdout)["groups"]["environments"]["plugins"]}


def _metrics(run: Path) -> dict[str, float]:
    overall = json.loads((run / "metrics.json").read_text())["overall"]
    return {"n_tasks": overall["n_tasks"], "scored": overall["n_rollouts_scored"], "reward": overall["mean_reward"]}


def test_eval_run_scores_the_plugin_environment(site: Path, tmp_path: Path) -> None:
    bundled = sum(1 for line in (FIXTURE / "src" / "palaestra_plugin_fixture" / "data" / "tasks.jsonl")
                  .read_text().splitlines() if line.strip())
    oracle = _cli(["eval", "run", "--env", "reverse_word", "--model", "scripted:oracle", "--out",
                   str(tmp_path / "oracle"), "-q"], site, tmp_path)
    assert oracle.returncode == 0, oracle.stdout + oracle.stderr
    assert _metrics(tmp_path / "oracle") == {"n_tasks": bundled, "scored": bundled, "reward": 1.0}

    # The plugin's verifier really scores: a policy that answers nothing gets nothing, through the
    # plugin's own agent (an entry point of the agents group).
    null = _cli(["eval", "run", "--env", "reverse_word", "--model", "scripted:null", "--agent", "fixture-single",
                 "--out", str(tmp_path / "null"), "-q"], site, tmp_path)
    assert null.returncode == 0, null.stdout + null.stderr
    assert _metrics(tmp_path / "null") == {"n_tasks": bundled, "scored": bundled, "reward": 0.0}
    rows = [json.loads(line) for line in (tmp_path / "null" / "rollouts.jsonl").read_text().splitlines()]
    assert {r["agent"] for r in rows if "rollout_id" in r} == {"fixture-single"}
    run = json.loads((tmp_path / "oracle" / "run.json").read_text())
    assert "reverse_word" in run["envs"]


def test_env_check_passes_on_the_plugin_environment(site: Path, tmp_path: Path) -> None:
    proc = _cli(["env", "check", "reverse_word"], site, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "oracle scores full reward" in proc.stdout and "FAIL" not in proc.stdout


def test_without_the_package_the_name_is_unknown(tmp_path: Path) -> None:
    proc = _cli(["eval", "run", "--env", "reverse_word", "--model", "scripted:oracle", "--out",
                 str(tmp_path / "run"), "-q"], None, tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown environment 'reverse_word'" in proc.stderr
