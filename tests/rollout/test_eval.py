"""``eval run``: journal, resume after SIGKILL, routing, malformed rows, failures kept apart from scores."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from palaestra.core.errors import InvalidTask
from palaestra.rollout.collector import run_eval
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal import read_journal

COUNTER = str(Path(__file__).parents[1] / "fixtures" / "counter_env.py") + ":CounterEnv"


def _scored_slots(run_dir: Path) -> Counter[tuple[str, int]]:
    records, problems = read_journal(run_dir / "rollouts.jsonl")
    return Counter((r["task_id"], r["repeat"]) for r in records if r["outcome"]["status"] == "scored")


def _write_rows(path: Path, n: int) -> None:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"k{i}", "env": "counter", "input": f"to {i + 3}",
                                 "metadata": {"start": 0, "target": i + 3}}) + "\n")


def test_resume_after_sigkill_gives_exactly_one_scored_rollout_per_slot(tmp_path: Path) -> None:
    rows = tmp_path / "tasks.jsonl"
    _write_rows(rows, 12)
    rng = random.Random(7)
    for trial in range(4):
        out = tmp_path / f"run{trial}"
        cmd = [sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--env", COUNTER, "--input", str(rows),
               "--model", "scripted:oracle?latency_ms=15", "-k", "3", "-c", "8", "--out", str(out), "-q"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.6, 1.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before = _scored_slots(out) if (out / "rollouts.jsonl").exists() else Counter()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        slots = _scored_slots(out)
        assert set(slots) == {(f"k{i}", r) for i in range(12) for r in range(3)}
        assert max(slots.values()) == 1, "a slot was scored twice"
        assert all(before[k] <= slots[k] for k in before)
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["overall"]["coverage"] == 1.0 and metrics["overall"]["mean_reward"] == 1.0


async def test_mixed_envs_and_agents_report_each(tmp_path: Path) -> None:
    rows = tmp_path / "mixed.jsonl"
    with rows.open("w") as fh:
        for i in range(4):
            fh.write(json.dumps({"id": f"c{i}", "env": "counter", "input": "x",
                                 "metadata": {"start": 0, "target": 5}}) + "\n")
            fh.write(json.dumps({"id": f"e{i}", "env": "echo", "agent": "single", "input": f"say {i}",
                                 "metadata": {"expected": f"say {i}"}}) + "\n")
    from palaestra.envs.registry import load_env_class

    load_env_class(COUNTER)
    load_env_class(str(Path(__file__).parents[1] / "fixtures" / "echo_env.py") + ":EchoEnv")
    cfg = RunConfig(input=str(rows), model="scripted:echo", out=str(tmp_path / "run"), repeats=2)
    result = await run_eval(cfg)
    groups = result.metrics["groups"]
    assert set(groups) == {"env=counter agent=tool model=scripted:echo", "env=echo agent=single model=scripted:echo"}
    assert groups["env=echo agent=single model=scripted:echo"]["mean_reward"] == 1.0
    assert groups["env=counter agent=tool model=scripted:echo"]["mean_reward"] == 0.0
    assert result.metrics["overall"]["n_tasks"] == 8


def test_malformed_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    rows = tmp_path / "bad.jsonl"
    rows.write_text('{"id": "a", "env": "mcqa", "input": "q", "metadata": {}}\n'
                    '{"id": "b", "env": "mcqa", "input": \n'
                    '{"id": "c", "env": "mcqa", "input": 5}\n')
    cmd = [sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--input", str(rows),
           "--model", "scripted:null", "--out", str(tmp_path / "r")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "bad.jsonl:2: field '(line)': not valid JSON" in proc.stderr
    assert "bad.jsonl:3: field 'input" in proc.stderr
    assert "--skip-invalid" in proc.stderr
    assert not (tmp_path / "r").exists()


async def test_flaky_model_gives_failed_rollouts_counted_apart(tmp_path: Path) -> None:
    cfg = RunConfig(env=COUNTER, model="scripted:oracle?failure_rate=0.3&seed=3", max_attempts=1,
                    repeats=4, out=str(tmp_path / "run"))
    result = await run_eval(cfg)
    records, _ = read_journal(tmp_path / "run" / "rollouts.jsonl")
    failed = [r for r in records if r["outcome"]["status"] == "failed"]
    assert failed and all(r["outcome"]["kind"] == "model" and r["verdict"] is None for r in failed)
    o = result.metrics["overall"]
    assert o["n_failed"] == {"model": len(failed)}
    assert o["n_rollouts_scored"] == len(records) - len(failed)
    assert o["coverage"] == pytest.approx((len(records) - len(failed)) / 24)
    assert o["mean_reward"] == 1.0  # failures are not zeros


async def test_failed_attempts_are_retried_and_kept(tmp_path: Path) -> None:
    cfg = RunConfig(env=COUNTER, model="scripted:oracle?failure_rate=0.1&seed=5", max_attempts=10,
                    repeats=2, out=str(tmp_path / "run"))
    result = await run_eval(cfg)
    records, _ = read_journal(tmp_path / "run" / "rollouts.jsonl")
    assert any(r["attempt"] > 0 for r in records)
    assert sum(r["outcome"]["status"] == "failed" for r in records) > 0
    assert result.metrics["overall"]["coverage"] == 1.0


async def test_no_tasks_and_unknown_env_are_clear(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no tasks"):
        await run_eval(RunConfig(model="scripted:null", out=str(tmp_path / "a")))
    rows = tmp_path / "r.jsonl"
    rows.write_text('{"id": "a", "env": "nosuch", "input": "q"}\n')
    with pytest.raises(Exception, match="task 'a': unknown environment 'nosuch'"):
        await run_eval(RunConfig(input=str(rows), model="scripted:null", out=str(tmp_path / "b")))
    rows.write_text('{"id": "a", "input": "q"}\n')
    with pytest.raises(InvalidTask, match="r.jsonl:1: field 'env'"):
        await run_eval(RunConfig(input=str(rows), model="scripted:null", out=str(tmp_path / "c")))
