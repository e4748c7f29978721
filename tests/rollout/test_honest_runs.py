"""A run tells the truth about itself (issue 17): rows are checked against their environment before the
first rollout, absurd sizes are refused before any allocation, a run that scored too little exits non-zero
with the cause, deterministic errors are not retried, and journal lines that cannot be read are counted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from palaestra.core.errors import ConfigError, InvalidTask, ModelError
from palaestra.metrics.status import run_status
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal_read import read_journal
from palaestra.server.ports import free_port

CLI = [sys.executable, "-m", "palaestra.cli.main"]

# Line 1: math without its answer; 2: math with no input and no metadata; 3: fine; 4: mcqa without its
# answer; 5: fine.
ROWS = [
    {"id": "m1", "env": "math", "input": "What is 1+1?"},
    {"id": "m2", "env": "math"},
    {"id": "ok1", "env": "math", "input": "What is 2+2?", "metadata": {"expected_answer": "4"}},
    {"id": "q1", "env": "mcqa", "input": "Which? A) x B) y"},
    {"id": "ok2", "env": "math", "input": "What is 3+3?", "metadata": {"expected_answer": "6"}},
]
BAD_LINES = (1, 2, 4)


def _write_rows(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---- validate before starting -------------------------------------------------------------------------

async def test_rows_missing_what_their_env_needs_are_all_refused_before_start(
        tmp_path: Path, counting_model: tuple[str, list[str]]) -> None:
    url, hits = counting_model
    rows = _write_rows(tmp_path / "rows.jsonl", ROWS)
    out = tmp_path / "run"
    with pytest.raises(InvalidTask) as info:
        await run_eval(RunConfig(input=str(rows), model=url, out=str(out)))
    message = info.value.message
    assert message.startswith("3 invalid task row(s)")
    for line in BAD_LINES:
        assert f"rows.jsonl:{line}: field 'metadata.expected_answer'" in message
    assert "rows.jsonl:3:" not in message and "rows.jsonl:5:" not in message
    assert "fix: add the answer" in message  # the environment's own hint, per row
    assert "--skip-invalid" in (info.value.hint or "")
    assert not out.exists()  # no run directory, so no rollouts.jsonl record
    assert hits == []  # and not one model call


def test_cli_refuses_invalid_rows_with_file_line_field(tmp_path: Path) -> None:
    rows = _write_rows(tmp_path / "rows.jsonl", ROWS)
    out = tmp_path / "run"
    proc = subprocess.run(CLI + ["eval", "run", "--input", str(rows), "--model", "scripted:oracle", "--out",
                                 str(out), "-q"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for line in BAD_LINES:
        assert f"rows.jsonl:{line}: field 'metadata.expected_answer'" in proc.stderr
    assert not (out / "rollouts.jsonl").exists()


async def test_skip_invalid_skips_exactly_the_invalid_rows(tmp_path: Path) -> None:
    rows = _write_rows(tmp_path / "rows.jsonl", ROWS)
    out = tmp_path / "run"
    result = await run_eval(RunConfig(input=str(rows), model="scripted:oracle", out=str(out), skip_invalid=True))
    assert sorted(int(s.split(":")[1]) for s in result.skipped_rows) == list(BAD_LINES)
    records, _ = read_journal(out / "rollouts.jsonl")
    assert sorted({r["task_id"] for r in records}) == ["ok1", "ok2"]
    assert result.status is not None and result.status.status == "complete" and result.exit_code == 0


async def test_a_crashing_check_and_an_empty_prompt_are_row_problems(tmp_path: Path) -> None:
    env_file = tmp_path / "picky_env.py"
    env_file.write_text(
        "from palaestra import Environment, Task, Trajectory, Verdict\n"
        "class PickyEnv(Environment):\n"
        "    name = 'picky'\n"
        "    def check_task(self, task: Task) -> None:\n"
        "        task.metadata['needed']\n"
        "    def verify(self, state, trajectory: Trajectory) -> Verdict:\n"
        "        return Verdict(reward=1.0)\n")
    spec = f"{env_file}:PickyEnv"
    rows = _write_rows(tmp_path / "rows.jsonl", [{"id": "a", "input": "x", "metadata": {"needed": 1}},
                                                 {"id": "b", "input": "x"},
                                                 {"id": "c", "metadata": {"needed": 1}}])
    with pytest.raises(InvalidTask) as info:
        await run_eval(RunConfig(input=str(rows), env=spec, model="scripted:oracle", out=str(tmp_path / "r")))
    message = info.value.message
    assert "rows.jsonl:2: field '(row)': the environment's check_task raised KeyError" in message
    assert "rows.jsonl:3: field 'input': empty" in message  # the default prompt would say nothing
    assert "rows.jsonl:1:" not in message


def test_absurd_repeats_are_refused_at_once(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(CLI + ["eval", "run", "--env", "math", "-k", "1000000000000", "--model",
                                 "scripted:oracle", "--out", str(out), "-q"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "1,000,000,000,000 repeats" in proc.stderr and "limit of 10,000,000" in proc.stderr
    assert "--max-rollouts" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


async def test_tasks_times_repeats_over_the_limit_names_both(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"5 task\(s\) × 3 repeat\(s\) = 15 rollouts is more than the limit of 10"):
        await run_eval(RunConfig(env="math", limit=5, repeats=3, max_rollouts=10, model="scripted:oracle",
                                 out=str(out)))
    assert not out.exists()


# ---- honest exit codes and summaries -------------------------------------------------------------------

async def test_all_failed_run_is_failed_and_names_the_cause(tmp_path: Path) -> None:
    result = await run_eval(RunConfig(env="math", limit=3, model="scripted:oracle?failure_rate=1",
                                      out=str(tmp_path / "run")))
    status = result.status
    assert status is not None and status.status == "failed" and result.exit_code == 4
    assert status.failures["model"]["count"] == 3
    assert "scripted failure" in status.failures["model"]["message"]
    text = "\n".join(status.lines())
    assert "FAILED: no rollout was scored" in text and "failed(model) × 3" in text and "what to do:" in text


def test_cli_all_failed_exits_4_with_the_cause(tmp_path: Path) -> None:
    proc = subprocess.run(CLI + ["eval", "run", "--env", "math", "--limit", "2", "--model",
                                 "scripted:oracle?failure_rate=1", "--out", str(tmp_path / "run"), "-q"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "failed(model) × 2" in proc.stderr and "scripted failure" in proc.stderr
    assert "--resume" in proc.stderr


def test_cli_dead_model_server_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """A model server that is down at the start is known then: the run is refused at once, naming the
    server (credentials redacted) and the fix, instead of journaling every row failed(model)."""
    port = free_port()  # nothing listens there
    out = tmp_path / "run"
    proc = subprocess.run(CLI + ["eval", "run", "--env", "math", "--limit", "3", "--model",
                                 f"http://user:sk-canary-1@127.0.0.1:{port}/v1", "--out", str(out), "-q"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"cannot reach the model server at http://***@127.0.0.1:{port}/v1 (Connection refused)" in proc.stderr
    assert "nothing was started" in proc.stderr and "start the model server" in proc.stderr
    assert "sk-canary" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


async def test_a_resume_against_a_dead_model_server_is_refused_and_keeps_the_journal(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = await run_eval(RunConfig(env="math", limit=2, model="scripted:oracle?failure_rate=1", max_attempts=1,
                                     out=str(out)))
    assert first.exit_code == 4
    journal = (out / "rollouts.jsonl").read_bytes()
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ModelError, match="cannot reach the model server") as refused:
        await run_eval(RunConfig(env="math", limit=2, model=dead, max_attempts=2, out=str(out)))
    assert dead in refused.value.message
    assert (out / "rollouts.jsonl").read_bytes() == journal  # the failed slots are still there to resume


async def test_partial_failure_against_min_coverage(tmp_path: Path) -> None:
    cfg = RunConfig(env="math", limit=6, repeats=4, max_attempts=1, model="scripted:oracle?failure_rate=0.3&seed=3",
                    out=str(tmp_path / "run"))
    result = await run_eval(cfg)
    coverage = result.metrics["overall"]["coverage"]
    assert 0 < coverage < 1  # the seed fails some calls, not all
    assert result.status is not None and result.status.status == "incomplete" and result.exit_code == 3
    assert run_status(result.metrics, coverage).exit_code == 0  # exactly at the bar passes
    assert run_status(result.metrics, min(1.0, coverage + 0.01)).exit_code == 3
    lenient = await run_eval(cfg.model_copy(update={"min_coverage": 0.0}))  # resume: nothing left to run
    assert lenient.collected == 0 and lenient.exit_code == 0


def test_cli_partial_failure_exits_3_and_min_coverage_lets_it_pass(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = CLI + ["eval", "run", "--env", "math", "--limit", "6", "-k", "4", "--max-attempts", "1", "--model",
                  "scripted:oracle?failure_rate=0.3&seed=3", "--out", str(out), "-q"]
    first = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert first.returncode == 3, first.stdout + first.stderr
    assert "INCOMPLETE" in first.stderr and "failed(model)" in first.stderr
    second = subprocess.run(base + ["--min-coverage", "0.1"], capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr


async def test_deterministic_failures_are_not_retried(tmp_path: Path) -> None:
    env_file = tmp_path / "late_env.py"
    env_file.write_text(
        "from palaestra import Environment, Task, Trajectory, Verdict\n"
        "from palaestra.core.errors import InvalidTask\n"
        "class LateEnv(Environment):\n"
        "    name = 'late'\n"
        "    def seed(self, task: Task):\n"
        "        raise InvalidTask(f'task {task.id} cannot be seeded', hint='fix it')\n"
        "    def verify(self, state, trajectory: Trajectory) -> Verdict:\n"
        "        return Verdict(reward=1.0)\n")
    rows = _write_rows(tmp_path / "rows.jsonl", [{"id": "a", "input": "x"}, {"id": "b", "input": "y"}])
    out = tmp_path / "run"
    result = await run_eval(RunConfig(input=str(rows), env=f"{env_file}:LateEnv", model="scripted:oracle",
                                      max_attempts=3, repeats=2, out=str(out)))
    records, _ = read_journal(out / "rollouts.jsonl")
    assert len(records) == 4  # one attempt per (task, repeat), not three
    assert all(r["outcome"]["kind"] == "environment" and r["outcome"]["message"].startswith("invalid_task:")
               for r in records)
    assert result.exit_code == 4 and result.status is not None
    assert "refused the row at run time (not retried)" in "\n".join(result.status.lines())


# ---- unreadable journal lines ----------------------------------------------------------------------------

def _run_then_damage(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    proc = subprocess.run(CLI + ["eval", "run", "--env", "math", "--limit", "5", "-k", "2", "--model",
                                 "scripted:oracle", "--out", str(out), "-q"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = (out / "rollouts.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == 10
    lines[3] = "this is not json\n"  # line 4 replaced by garbage
    lines.insert(6, json.dumps({"rollout_id": "x", "outcome": "nonsense"}) + "\n")  # line 7: JSON, no Rollout
    (out / "rollouts.jsonl").write_text("".join(lines))
    return out


def test_garbage_journal_lines_are_counted_and_warned(tmp_path: Path) -> None:
    out = _run_then_damage(tmp_path)
    proc = subprocess.run(CLI + ["eval", "metrics", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "warning: 2 journal line(s) could not be read" in proc.stderr
    assert "rollouts.jsonl:4: invalid JSON" in proc.stderr and "rollouts.jsonl:7: not a Rollout" in proc.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["journal_unreadable"] == 2
    assert metrics["overall"]["n_rollouts_scored"] == 9

    rev = subprocess.run(CLI + ["eval", "reverify", str(out)], capture_output=True, text=True, timeout=180)
    assert "Traceback" not in rev.stderr, rev.stderr
    assert "warning: 2 journal line(s) could not be read" in rev.stderr
    assert rev.returncode == 3  # one slot's only record was the garbage line: coverage 90 % < 100 %
    assert json.loads((out / "metrics.reverify.json").read_text())["journal_unreadable"] == 2

    report = subprocess.run(CLI + ["report", str(out)], capture_output=True, text=True, timeout=180)
    assert report.returncode == 0 and "rollouts.jsonl:4: invalid JSON" in report.stderr
