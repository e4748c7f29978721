"""The public Python API (``palaestra.evaluate``, ``evaluate_async``, ``collect``): README's example runs as
written, results carry the run's verdict (an all-failed run is ``failed``, not a reward of 0), collect
delivers exactly k rollouts per task in groups of k, the API leaves ``os.environ`` alone, and importing
``palaestra`` does not import the run machinery until the API is first named."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import palaestra
from palaestra.api import EvalResult, collect, evaluate, evaluate_async
from palaestra.core.errors import ConfigError, InvalidTask
from palaestra.core.records import Rollout, Task
from palaestra.rollout.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def readme_api_block() -> str:
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```", README, re.S | re.M) if "palaestra.evaluate(" in b]
    assert len(blocks) == 1, "README should show exactly one Python block using palaestra.evaluate"
    return blocks[0]


def test_readme_api_example_runs_as_written(tmp_path: Path) -> None:
    block = readme_api_block()
    assert "palaestra.collect(" in block
    (tmp_path / "example.py").write_text(block, encoding="utf-8")
    proc = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # what it printed is what the run directory holds
    (metrics_file,) = tmp_path.glob("runs/*/metrics.json")
    overall = json.loads(metrics_file.read_text())["overall"]
    assert overall["n_rollouts_scored"] == 5
    assert f"complete: mean reward {overall['mean_reward']:.2f}" in proc.stdout
    group_lines = [line for line in proc.stdout.splitlines() if line.startswith("mcqa-")]
    assert len(group_lines) == 2  # limit=2 tasks, one group each
    for line in group_lines:
        rewards = json.loads(line.split(" ", 1)[1])
        assert len(rewards) == 4 and all(r == 1.0 for r in rewards)  # the oracle, k=4


def test_complete_run_result(tmp_path: Path) -> None:
    result = evaluate(env="mcqa", model="scripted:oracle", limit=3, k=2, out=tmp_path / "run")
    assert isinstance(result, EvalResult)
    assert (result.status, result.exit_code, result.ok) == ("complete", 0, True)
    assert result.run_dir == tmp_path / "run" and (result.run_dir / "metrics.json").is_file()
    assert result.metrics == json.loads((result.run_dir / "metrics.json").read_text())
    assert result.mean_reward == 1.0 and result.coverage == 1.0
    assert result.collected == 6 and result.failures == {} and result.skipped_rows == []
    assert result.config.repeats == 2
    again = evaluate(env="mcqa", model="scripted:oracle", limit=3, k=2, out=tmp_path / "run")
    assert (again.collected, again.resumed, again.status) == (0, 6, "complete")  # the same out resumes


def test_all_failed_run_is_failed_not_zero(tmp_path: Path) -> None:
    result = evaluate(env="mcqa", model="scripted:oracle?failure_rate=1", limit=2, max_attempts=1,
                      out=tmp_path / "run")
    assert (result.status, result.exit_code, result.ok) == ("failed", 4, False)
    assert result.failures == {"model": 2}
    assert result.mean_reward is None  # no score at all, never a mean of zeros
    assert result.lines()[0] == "FAILED: no rollout was scored"
    records = [json.loads(line) for line in (result.run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["outcome"]["status"] == "failed" for r in records)


def mcqa_task(task_id: str, answer: str = "B", **fields: object) -> Task:
    return Task.model_validate({"id": task_id, "env": "mcqa", "input": "Which letter?",
                                "metadata": {"options": {"A": "this", "B": "that"}, "expected_answer": answer},
                                **fields})


def test_incomplete_run_exits_3_and_min_coverage_decides(tmp_path: Path) -> None:
    """One task's row names a model that always fails: half the slots scored."""
    tasks = [mcqa_task("good"), mcqa_task("down", model="scripted:oracle?failure_rate=1")]
    short = evaluate(tasks, model="scripted:oracle", out=tmp_path / "a", max_attempts=1)
    assert (short.status, short.exit_code, short.coverage, short.failures) == ("incomplete", 3, 0.5, {"model": 1})
    assert short.mean_reward == 1.0  # over what was scored; the failed slot is not a zero
    lenient = evaluate(tasks, model="scripted:oracle", out=tmp_path / "b", max_attempts=1, min_coverage=0.5)
    assert (lenient.status, lenient.exit_code) == ("complete", 0)


def test_in_memory_tasks_are_checked_like_a_file(tmp_path: Path) -> None:
    bad = {"id": "x", "env": "mcqa", "input": "which?"}  # mcqa needs its options
    with pytest.raises(InvalidTask) as err:
        evaluate([bad], model="scripted:oracle", out=tmp_path / "run")
    assert "x" in str(err.value) or "input.jsonl" in str(err.value)
    good = mcqa_task("t1")
    result = evaluate([good, bad], model="scripted:oracle", out=tmp_path / "run2", skip_invalid=True)
    assert result.status == "complete" and len(result.skipped_rows) == 1 and result.collected == 1


def test_a_task_file_and_a_run_file_resolve_as_on_the_command_line(tmp_path: Path) -> None:
    rows = tmp_path / "tasks.jsonl"
    rows.write_text("".join(mcqa_task(f"t{i}").model_dump_json() + "\n" for i in range(3)), encoding="utf-8")
    run_file = tmp_path / "run.yaml"
    run_file.write_text("model: scripted:null\nrepeats: 2\nlimit: 2\n", encoding="utf-8")
    result = evaluate(rows, config=run_file, model="scripted:oracle", out=tmp_path / "run")  # an argument wins
    assert (result.config.model, result.config.repeats, result.config.limit) == ("scripted:oracle", 2, 2)
    assert result.collected == 4 and result.mean_reward == 1.0
    manifest = json.loads((result.run_dir / "run.json").read_text())
    assert manifest["config"]["input"] == str(rows) and manifest["config"]["model"] == "scripted:oracle"


def test_refusals_raise_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a run directory"):
        evaluate(resume=tmp_path)
    with pytest.raises(ConfigError, match="unknown run option"):
        evaluate(env="mcqa", model="scripted:oracle", colour="blue")
    with pytest.raises(ConfigError, match="disagree"):
        evaluate(env="mcqa", k=2, repeats=3)


def test_every_run_option_is_an_argument() -> None:
    """Everything ``eval run`` can set, evaluate can: a named parameter, or a RunConfig field by name."""
    named = set(inspect.signature(evaluate_async).parameters)
    api_only = {"tasks", "k", "config", "config_sources", "resume", "settings", "on_start", "on_rollout", "more"}
    assert named - api_only <= set(RunConfig.model_fields)
    core = {"input", "env", "limit", "repeats", "concurrency", "model", "agent", "out", "min_coverage", "placement",
            "cluster", "max_attempts", "seed", "temperature", "max_tokens", "deadline_s", "skip_invalid"}
    assert core <= named
    assert inspect.signature(evaluate).parameters.keys() == inspect.signature(evaluate_async).parameters.keys()


def test_evaluate_leaves_os_environ_alone(tmp_path: Path) -> None:
    before = dict(os.environ)
    evaluate(env="mcqa", model="scripted:oracle", limit=2, out=tmp_path / "run")
    assert dict(os.environ) == before


async def test_evaluate_works_inside_a_running_loop(tmp_path: Path) -> None:
    """A notebook cell has a running loop: the blocking form still works there (on a loop of its own)."""
    seen: list[bool] = []
    result = evaluate(env="mcqa", model="scripted:oracle", limit=2, out=tmp_path / "run",
                      on_rollout=lambda r, final: seen.append(final))
    assert result.status == "complete" and seen == [True, True]
    also = await evaluate_async(env="mcqa", model="scripted:oracle", limit=2, out=tmp_path / "run2")
    assert also.metrics["overall"]["n_rollouts_scored"] == 2


async def test_collect_yields_k_rollouts_per_task() -> None:
    rows = [mcqa_task(name) for name in "abc"]
    got: list[Rollout] = [r async for r in collect(rows, k=3, model="scripted:oracle", max_in_flight=4)]
    assert len(got) == 9
    assert all(isinstance(r, Rollout) and r.outcome.status == "scored" and r.reward == 1.0 for r in got)
    assert sorted((r.task_id, r.repeat) for r in got) == [(t, i) for t in "abc" for i in range(3)]


async def test_collect_groups_hold_the_k_rollouts_of_one_task() -> None:
    groups = [g async for g in collect(env="mcqa", limit=4, k=2, groups=True, model="scripted:oracle")]
    assert len(groups) == 4 and len({g.task_id for g in groups}) == 4
    for g in groups:
        assert len(g.rollouts) == 2 and {r.task_id for r in g.rollouts} == {g.task_id}
        assert [r.repeat for r in g.rollouts] == [0, 1] and g.rewards() == [1.0, 1.0] and g.padded == []


async def test_collect_failures_are_failed_not_zero() -> None:
    got = [r async for r in collect(env="mcqa", limit=2, k=2, model="scripted:oracle?failure_rate=1")]
    assert len(got) == 4
    assert all(r.outcome.status == "failed" and r.outcome.kind == "model" and r.reward is None for r in got)


async def test_collect_stops_cleanly_when_left_early() -> None:
    stream = collect(env="mcqa", limit=6, k=2, model="scripted:oracle?latency_ms=20", max_in_flight=2)
    first = await stream.__anext__()
    await stream.aclose()  # cancels what is still running; must not hang or raise
    assert first.outcome.status == "scored"


def test_collect_refuses_evaluate_only_options() -> None:
    async def go() -> None:
        async for _ in collect(env="mcqa", model="scripted:oracle", out="somewhere"):
            pass

    with pytest.raises(ConfigError, match="does not take out"):
        asyncio.run(go())


def test_import_palaestra_stays_light() -> None:
    code = ("import sys, palaestra; heavy = [m for m in ('palaestra.api', 'palaestra.orchestrator', "
            "'palaestra.rollout.collector') if m in sys.modules]; print(heavy); "
            "palaestra.evaluate; print('palaestra.api' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "True"]
    assert "evaluate" in dir(palaestra) and palaestra.collect is collect
