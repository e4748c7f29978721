"""Reverify without a model, metrics recomputed from a journal, NeMo Gym rows, Parquet, YAML config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig, resolve
from palaestra.rollout.reverify import reverify_run
from palaestra.rollout.tasks import load_task_file

FIXTURES = Path(__file__).parents[1] / "fixtures"
CLI = [sys.executable, "-m", "palaestra.cli.main"]


async def test_reverify_rescores_with_the_current_verifier(tmp_path: Path) -> None:
    env_file = tmp_path / "cenv.py"
    env_file.write_text((FIXTURES / "counter_env.py").read_text())
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "examples.jsonl").write_text((FIXTURES / "data" / "examples.jsonl").read_text())
    run_dir = tmp_path / "run"
    result = await run_eval(RunConfig(env=f"{env_file}:CounterEnv", model="scripted:oracle", out=str(run_dir)))
    assert result.metrics["overall"]["mean_reward"] == 1.0
    assert result.metrics["env_metrics"]["counter"]["mean_tool_calls"] > 0

    same = await reverify_run(run_dir)
    assert same.checked == 6 and not same.changed and same.metrics["overall"]["mean_reward"] == 1.0

    # The verifier changes (answers no longer count): reverify sees it without any model call.
    env_file.write_text(env_file.read_text().replace("reward = 0.5 * hit + 0.5 * answered", "reward = 0.5 * hit"))
    import importlib
    import sys as _sys

    for name in [m for m in _sys.modules if m.startswith("palaestra_user_env_")]:
        del _sys.modules[name]
    importlib.invalidate_caches()
    changed = await reverify_run(run_dir)
    assert len(changed.changed) == 6
    assert changed.metrics["overall"]["mean_reward"] == 0.5
    diff = [json.loads(line) for line in (run_dir / "reverify_diff.jsonl").read_text().splitlines()]
    assert {d["before"]["reward"] for d in diff} == {1.0} and {d["after"]["reward"] for d in diff} == {0.5}
    assert json.loads((run_dir / "metrics.json").read_text())["overall"]["mean_reward"] == 1.0  # untouched
    assert json.loads((run_dir / "metrics.reverify.json").read_text())["overall"]["mean_reward"] == 0.5


def test_eval_metrics_cli_recomputes_from_the_journal(tmp_path: Path) -> None:
    out = tmp_path / "run"
    subprocess.run(CLI + ["eval", "run", "--env", "mcqa", "--limit", "5", "--model", "scripted:oracle", "-k", "2",
                          "--out", str(out), "-q"], check=True, capture_output=True, timeout=120)
    (out / "metrics.json").unlink()
    proc = subprocess.run(CLI + ["eval", "metrics", str(out), "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout)
    assert m["overall"]["n_tasks"] == 5 and m["overall"]["pass_at_k"]["2"] == 1.0
    assert (out / "metrics.json").is_file()


def test_nemo_gym_rows_are_read_as_they_are(tmp_path: Path) -> None:
    row = {"responses_create_params": {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "Which planet is largest?\nA) Mars\nB) Jupiter\nPut it in \\boxed{}."}]}],
        "temperature": 0.5},
        "options": [{"A": "Mars"}, {"B": "Jupiter"}], "expected_answer": "B",
        "grading_mode": "strict_single_letter_boxed", "agent_ref": {"name": "mcqa_simple_agent"}, "uuid": "u-1"}
    path = tmp_path / "nemo.jsonl"
    path.write_text(json.dumps(row) + "\n")
    loaded = load_task_file(path, "mcqa")
    assert not loaded.problems
    t = loaded.tasks[0]
    assert t.id == "u-1" and t.env == "mcqa"
    assert t.input == [{"role": "user", "content": row["responses_create_params"]["input"][0]["content"][0]["text"]}]
    assert t.metadata["expected_answer"] == "B" and t.metadata["grading_mode"] == "strict_single_letter_boxed"
    assert t.metadata["nemo_gym_agent_ref"] == {"name": "mcqa_simple_agent"}
    assert t.metadata["nemo_gym_sampling"] == {"temperature": 0.5}


async def test_nemo_gym_rows_score_end_to_end(tmp_path: Path) -> None:
    rows = tmp_path / "nemo.jsonl"
    with rows.open("w") as fh:
        for i, letter in enumerate("ABCD"):
            fh.write(json.dumps({"responses_create_params": {"input": [{"role": "user", "content": f"Q{i}?"}]},
                                 "options": [{"A": "a"}, {"B": "b"}, {"C": "c"}, {"D": "d"}],
                                 "expected_answer": letter, "grading_mode": "strict_single_letter_boxed"}) + "\n")
    result = await run_eval(RunConfig(input=str(rows), env="mcqa", model="scripted:constant?text=\\boxed{B}",
                                      out=str(tmp_path / "run")))
    assert result.metrics["overall"]["mean_reward"] == 0.25


def test_parquet_input(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow: the [parquet] extra is not installed")
    import pyarrow as pa

    table = pa.Table.from_pylist([{"id": "p1", "env": "mcqa", "input": "Q?",
                                   "metadata": {"options": ["x", "y"], "expected_answer": "A"}}])
    pq.write_table(table, tmp_path / "t.parquet")
    loaded = load_task_file(tmp_path / "t.parquet")
    assert not loaded.problems and loaded.tasks[0].id == "p1"
    assert loaded.tasks[0].metadata["expected_answer"] == "A"


def test_yaml_config_and_flags_with_sources(tmp_path: Path) -> None:
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text("env: mcqa\nrepeats: 4\nmax-attempts: 2\n")
    cfg, sources = resolve({"repeats": 8}, str(cfg_file))
    assert cfg.env == "mcqa" and cfg.repeats == 8 and cfg.max_attempts == 2
    assert sources["repeats"] == "flag" and sources["max_attempts"].startswith("file") and sources["seed"] == "default"
    cfg_file.write_text("env: mcqa\nrepeets: 4\n")
    with pytest.raises(Exception, match="unknown option"):
        resolve({}, str(cfg_file))
    proc = subprocess.run(CLI + ["config", "show", "--config", str(tmp_path / "missing.yaml")], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "config file not found" in proc.stderr


def test_secrets_never_reach_run_json(tmp_path: Path, counting_model: tuple[str, list[str]]) -> None:
    """Credentials in the model URL reach no file of the run, its failure records included: the model
    answers every request HTTP 500, so each rollout fails with a message that names the server."""
    url, hits = counting_model
    secret_url = url.replace("http://", "http://user:sk-canary-123@") + "?api_key=sk-canary-456"
    out = tmp_path / "run"
    environ = {k: v for k, v in __import__("os").environ.items() if k != "OPENAI_API_KEY"}
    run = CLI + ["eval", "run", "--env", "mcqa", "--limit", "2", "--model", secret_url, "--max-attempts", "1",
                 "--deadline", "5", "--out", str(out), "-q"]
    proc = subprocess.run(run, capture_output=True, text=True, timeout=120, env=environ)
    assert proc.returncode == 4, proc.stderr  # every rollout failed: the run exits "failed", not green
    assert "FAILED: no rollout was scored" in proc.stderr and "failed(model)" in proc.stderr
    assert "sk-canary" not in proc.stdout + proc.stderr  # the summary names the server, redacted
    assert hits  # the requests reached the server: the failures are its answers
    for f in out.iterdir():
        text = f.read_text()
        assert "sk-canary" not in text, f.name
    m = json.loads((out / "metrics.json").read_text())
    assert m["overall"]["n_failed"] == {"model": 2}  # the server answered 500: failed, not zero
    # An API key as well: a request can carry one Authorization only, and the run says so before any call
    # (it used to send none and report each rollout as a crash of the backend).
    before = len(hits)
    proc = subprocess.run(run[:-3] + ["--out", str(tmp_path / "run2"), "-q"], capture_output=True, text=True,
                          timeout=120, env={**environ, "OPENAI_API_KEY": "sk-canary-789"})
    assert proc.returncode == 2, proc.stderr
    assert "carries credentials (user:password@) and an API key" in proc.stderr
    assert "drop the credentials" in proc.stderr
    assert "sk-canary" not in proc.stdout + proc.stderr and len(hits) == before
