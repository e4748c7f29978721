"""A YAML run file with several (dataset × agent × model) entries: one job, one journal, metrics per entry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "palaestra.cli.main"]


def test_run_file_with_entries(tmp_path: Path) -> None:
    run_file = tmp_path / "run.yaml"
    run_file.write_text(
        "repeats: 2\n"
        "entries:\n"
        "  - {name: mcqa-oracle, env: mcqa, limit: 4, agent: single, model: scripted:oracle}\n"
        "  - {name: mcqa-null, env: mcqa, limit: 4, agent: tool, model: scripted:null}\n"
        "  - {name: work-oracle, env: workplace, limit: 3, model: scripted:oracle}\n")
    out = tmp_path / "run"
    proc = subprocess.run(CLI + ["eval", "run", "--config", str(run_file), "--out", str(out), "-q"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    groups = metrics["groups"]
    assert groups["env=mcqa agent=single model=scripted:oracle"]["mean_reward"] == 1.0
    assert groups["env=mcqa agent=tool model=scripted:null"]["mean_reward"] == 0.0
    assert groups["env=workplace agent=tool model=scripted:oracle"]["mean_reward"] == 1.0
    assert metrics["overall"]["n_rollouts_scored"] == (4 + 4 + 3) * 2
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert {r["task_id"].split("/")[0] for r in records} == {"mcqa-oracle", "mcqa-null", "work-oracle"}
    assert all(f"entry:{r['task_id'].split('/')[0]}" in r["tags"] for r in records)


def test_run_file_entry_names_must_be_distinct(tmp_path: Path) -> None:
    run_file = tmp_path / "run.yaml"
    run_file.write_text("entries:\n  - {name: a, env: mcqa}\n  - {name: a, env: math}\n")
    proc = subprocess.run(CLI + ["eval", "run", "--config", str(run_file), "--out", str(tmp_path / "r"), "-q"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "distinct names" in proc.stderr
