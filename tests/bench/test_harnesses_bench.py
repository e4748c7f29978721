"""bench/harnesses.py runs at its tiny size (one rollout each of the in-process harnesses and Aider on the
terminal task, scripted model) and prints its table and JSON: every harness scored and passed, and every
call the model served is in its trajectory. What it needs is decided before it starts: the [sdk] extra,
Aider (setup-agents.sh) and the jail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from palaestra.agents.external import AiderAdapter
from palaestra.agents.external.netns import isolation_problem
from palaestra.agents.sdk import SDK_AGENTS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


def test_harness_matrix_tiny() -> None:
    missing = [c.distribution for c in SDK_AGENTS.values() if not c.available()]
    if missing:
        pytest.skip(f"sdk: {', '.join(missing)} not installed (pip install 'palaestra[sdk]')")
    if (problem := isolation_problem()) is not None:
        pytest.skip(f"netns: external CLIs need a network namespace here: {problem}")
    if not AiderAdapter().available():
        pytest.skip("agents: PyPI aider-chat is not installed (bash .ci/setup-agents.sh installs it)")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "harnesses.py"), "--tiny"], cwd=ROOT,
                          capture_output=True, text=True, timeout=540, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
    [fig] = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    rows = {r["harness"]: r for r in fig["rows"]}
    assert set(rows) == {"tool", "openai-agents", "smolagents", "strands-agents", "aider"}
    for row in rows.values():
        assert row["rollouts"] == row["scored"] == 1 and row["mean_reward"] == 1.0, row
        assert row["all_captured"] and row["model_calls_per_rollout"] >= 1, row
        assert row["token_id_coverage"] == 0.0 and row["checked_turns"] == 0  # the scripted model has no ids
        assert row["wall_s_per_rollout"] > 0 and row["cpu_s_per_rollout"] > 0
    for name in ("openai-agents", "smolagents", "strands-agents"):
        assert rows[name]["version"] == SDK_AGENTS[name].installed_version()
    aider = rows["aider"]
    assert aider["version"] == AiderAdapter().installed_version() and aider["dialect"] == "Chat Completions"
    assert "| harness | version | dialect |" in done.stdout  # the markdown table, as docs/harnesses.md shows it
