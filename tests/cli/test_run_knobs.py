"""``eval run --tool-choice`` and the default seed: what the flags promise is what reaches every model request
and what run.json records (scripted model, the counter tool environment, in-process)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from palaestra.cli.main import app
from palaestra.rollout.journal_read import read_journal

COUNTER = str(Path(__file__).parents[1] / "fixtures" / "counter_env.py") + ":CounterEnv"


def _rows(path: Path, n: int = 2) -> Path:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"k{i}", "env": "counter", "input": f"to {i + 3}",
                                 "metadata": {"start": 0, "target": i + 3}}) + "\n")
    return path


def _run(tmp_path: Path, out: str, *extra: str) -> Any:
    args = ["eval", "run", "--env", COUNTER, "--input", str(_rows(tmp_path / "tasks.jsonl")),
            "--model", "scripted:oracle", "-k", "2", "--out", str(tmp_path / out), "-q", *extra]
    return CliRunner().invoke(app, args)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    records, problems = read_journal(run_dir / "rollouts.jsonl")
    assert not problems
    return records


def test_tool_choice_reaches_every_request_and_run_json(tmp_path: Path) -> None:
    result = _run(tmp_path, "run", "--tool-choice", "required")
    assert result.exit_code == 0, result.output
    records = _records(tmp_path / "run")
    calls = [c for r in records for c in r["trajectory"]["model_calls"]]
    assert len(records) == 4 and calls
    assert all(c["request"].get("tools") for c in calls)  # the counter offers tools on every turn
    assert [c["request"].get("tool_choice") for c in calls] == ["required"] * len(calls)
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["config"]["tool_choice"] == "required"


def test_no_tool_choice_sends_none(tmp_path: Path) -> None:
    assert _run(tmp_path, "run").exit_code == 0
    calls = [c for r in _records(tmp_path / "run") for c in r["trajectory"]["model_calls"]]
    assert calls and all("tool_choice" not in c["request"] for c in calls)


def test_invalid_tool_choice_is_refused_before_work_naming_the_flag(tmp_path: Path) -> None:
    result = _run(tmp_path, "run", "--tool-choice", "sometimes")
    assert result.exit_code != 0
    assert "tool_choice" in result.output and "--tool-choice" in result.output
    assert not (tmp_path / "run").exists()  # nothing was written: refused before the run started


def _seeds(run_dir: Path) -> dict[tuple[str, int], list[Any]]:
    return {(r["task_id"], r["repeat"]): [c["request"].get("seed") for c in r["trajectory"]["model_calls"]]
            for r in _records(run_dir)}


def test_default_seed_is_recorded_and_repeats_the_run(tmp_path: Path) -> None:
    assert _run(tmp_path, "first").exit_code == 0
    seed = json.loads((tmp_path / "first" / "run.json").read_text())["seed"]
    assert isinstance(seed, int)
    first = _seeds(tmp_path / "first")
    assert all(s and all(isinstance(x, int) for x in s) for s in first.values())
    assert {s[0] for s in first.values()} == {seed, seed + 1}  # repeat i samples with seed + i
    again = _run(tmp_path, "again", "--seed", str(seed))
    assert again.exit_code == 0, again.output
    assert _seeds(tmp_path / "again") == first
    assert json.loads((tmp_path / "again" / "run.json").read_text())["seed"] == seed
