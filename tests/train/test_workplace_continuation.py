"""``eval run --env workplace`` on the real local model (SmolLM2-135M on CPU): the model calls tools turn
after turn, every turn continues the exact ids of the one before (continuation is on by default for a
backend that honours it), so the drift check over at least 10 checked turns finds none, and the run
reports ``checked_turns`` (metrics.json and the printed table).

Shape: one task, one rollout, 11 turns, each a constrained tool call (``--tool-choice required``: the
135M model does not call tools on its own). One rollout keeps the cost at 11 prefills of the ~2,000-token
workplace prompt (about 3.5 CPU-minutes on one thread); the drift check needs turns, not rollouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from palaestra.cli.main import app
from palaestra.rollout.journal_read import read_journal

pytestmark = pytest.mark.timeout(1800)  # minutes on a 2-core machine; far more when it is shared
STEPS = 11


def test_workplace_on_the_local_model_keeps_exact_ids_over_ten_checked_turns(local_model_path: Path,
                                                                            tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "eval", "run", "--env", "workplace", "--limit", "1", "-k", "1", "--model", "local?threads=1",
        "--tool-choice", "required", "--max-steps", str(STEPS), "--max-tokens", "128", "--temperature", "0",
        "--seed", "7", "--deadline", "1700", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    records, problems = read_journal(out / "rollouts.jsonl")
    assert not problems and len(records) == 1
    rollout = records[0]
    assert rollout["outcome"]["status"] == "scored", rollout["outcome"]
    calls = rollout["trajectory"]["model_calls"]
    assert len(calls) == STEPS and len(rollout["trajectory"]["tool_calls"]) >= STEPS  # a tool call every turn
    # every turn after the first was sent as a continuation of the exact ids before it
    assert [(c["response"].get("palaestra") or {}).get("continued") for c in calls] == [None] + [True] * (STEPS - 1)
    fidelity = json.loads((out / "metrics.json").read_text())["token_fidelity"]
    assert fidelity["checked_turns"] >= 10
    assert fidelity["drifted_turns"] == 0 and fidelity["token_drift_rate"] == 0.0
    assert f"0 of {fidelity['checked_turns']} checked turns" in result.output  # the printed table says so
