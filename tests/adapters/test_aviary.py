"""The Aviary adapter against the real ``fhaviary`` package: the environments it ships (``DummyEnv``,
the registered ``dummy`` task dataset) and ones written with its functional API run as Palaestra
environments, through ``palaestra eval run`` and ``palaestra env check``: the oracle's scripted replay
of the winning calls earns full reward, doing nothing earns none, and Aviary's own failures come back
failed(environment), never 0."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aviary.core", reason="aviary: fhaviary is not installed (pip install 'palaestra[aviary]')")

from palaestra.core.errors import BadArguments, EnvironmentFailure, ToolError, UnknownTool
from palaestra.core.records import Task, Trajectory
from palaestra.envs.registry import load_env, load_env_class
from palaestra.rollout.conformance import check_env

CLI = [sys.executable, "-m", "palaestra.cli.main"]
DUMMY = "aviary:aviary.core:DummyEnv"
STORIES = ["cats", "the sea", "a lost key"]


def _dummy_rows(path: Path) -> Path:
    with path.open("w") as fh:
        for i, topic in enumerate(STORIES):
            fh.write(json.dumps({"id": f"story-{i}", "metadata": {
                "aviary": {"task": topic},
                "reference_calls": [{"name": "print_story", "arguments": {"story": f"A tale about {topic}"}}]}}) + "\n")
    return path


def _rollouts(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines() if line.strip()]


def _eval(rows: Path, env: str, policy: str, out: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "eval", "run", "--env", env, "--input", str(rows), "--model", f"scripted:{policy}",
                           "--out", str(out), "-q"], capture_output=True, text=True, timeout=180, cwd=cwd)


@pytest.mark.parametrize("placement", ["inprocess", "local"])
async def test_dummy_env_passes_env_check(tmp_path: Path, placement: str) -> None:
    env = load_env(DUMMY)
    tasks = [Task.model_validate({**json.loads(line), "env": env.name})
             for line in _dummy_rows(tmp_path / "t.jsonl").read_text().splitlines()]
    report = await check_env(DUMMY, placement, tasks=tasks)
    failed = [f"{r.name}: {r.detail}" for r in report.results if not r.ok]
    assert not failed, failed
    assert report.tasks == 3


def test_env_check_cli_and_eval_run_oracle_and_null(tmp_path: Path) -> None:
    rows = _dummy_rows(tmp_path / "stories.jsonl")
    check = subprocess.run([*CLI, "env", "check", DUMMY, "--input", str(rows)], capture_output=True, text=True,
                           timeout=180)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "oracle scores full reward" in check.stdout and "FAIL" not in check.stdout

    for policy, want in (("oracle", 1.0), ("null", 0.0)):
        run = _eval(rows, DUMMY, policy, tmp_path / policy)
        assert run.returncode == 0, run.stdout + run.stderr
        got = _rollouts(tmp_path / policy)
        assert len(got) == 3 and all(r["outcome"]["status"] == "scored" for r in got)
        assert [r["verdict"]["reward"] for r in got] == [want] * 3
        assert all(r["verdict"]["passed"] is (want == 1.0) for r in got)
        assert {r["env"] for r in got} == {"aviary-dummyenv"}
    oracle = _rollouts(tmp_path / "oracle")[0]["trajectory"]["messages"]
    assert oracle[0] == {"role": "user", "content": "Write a 5 word story via print_story about cats"}


def test_registered_dataset_name(tmp_path: Path) -> None:
    """``aviary:dummy`` is Aviary's registered DummyTaskDataset: its episodes come from get_new_env()."""
    env = load_env("aviary:dummy")
    assert env.name == "aviary-dummy" and len(env.examples()) == env.example_count
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"d{i}", "metadata": {"reference_calls": [
        {"name": "print_story", "arguments": {"story": "one two three four five"}}]}}) + "\n" for i in range(2)))
    run = _eval(rows, "aviary:dummy", "oracle", tmp_path / "run")
    assert run.returncode == 0, run.stdout + run.stderr
    assert [r["verdict"]["reward"] for r in _rollouts(tmp_path / "run")] == [1.0, 1.0]


async def test_tools_steps_and_episode_end() -> None:
    env = load_env(DUMMY)
    names = [t["function"]["name"] for t in env.tool_schemas()]
    assert names == ["print_story", "cast_float", "cast_int", "get_random_int"]
    task = Task(id="t", env=env.name, input="Be brief.", metadata={"aviary": {"kwargs": {"task": "owls"}}})
    assert [t["function"]["name"] for t in env.tool_schemas(task)] == names  # read from a throwaway episode
    state = await env.seed(task)
    try:
        # the task's own prompt, then Aviary's reset observation
        assert env.prompt(task) == [{"role": "user", "content": "Be brief."},
                                    {"role": "user", "content": "Write a 5 word story via print_story about owls"}]
        assert await env.call_tool(state, "cast_float", {"x": "2.5"}) == {"content": "2.5", "reward": 0.0,
                                                                          "done": False}
        with pytest.raises(BadArguments):
            await env.call_tool(state, "cast_int", {"x": 1.5, "extra": 1})
        with pytest.raises(UnknownTool):
            await env.call_tool(state, "print_poem", {})
        # the tool function itself raises (DummyEnv does not catch it): the model reads it, the episode goes on
        with pytest.raises(ToolError, match="ValueError"):
            await env.call_tool(state, "cast_float", {"x": "not a number"})
        assert env.verify(state, Trajectory()).reward == 0.0
        out = await env.call_tool(state, "print_story", {"story": "Owls watch the night sky"})
        assert out["done"] is True and out["reward"] == 1.0
        with pytest.raises(ToolError, match="episode is over"):
            await env.call_tool(state, "print_story", {"story": "again"})
        verdict = env.verify(state, Trajectory())
        assert verdict.reward == 1.0 and verdict.passed and verdict.metadata["steps"] == 2
    finally:
        await env.close(state)


async def test_step_rewards_are_summed(adapters_dir: Path) -> None:
    env = load_env("aviary:aviary_envs:two_steps")
    task = Task(id="w", env=env.name, metadata={"aviary": {"kwargs": {"word": "hop"}}})
    state = await env.seed(task)
    try:
        await env.call_tool(state, "say", {"word": "hop"})
        half = env.verify(state, Trajectory())
        assert half.reward == 0.5 and not half.passed  # not done yet
        await env.call_tool(state, "say", {"word": "hop"})
        full = env.verify(state, Trajectory())
        assert full.reward == 1.0 and full.passed and full.metadata["rewards"] == [0.5, 0.5]
    finally:
        await env.close(state)


def test_a_broken_reset_is_failed_environment_not_zero(tmp_path: Path, adapters_dir: Path) -> None:
    env = load_env("aviary:aviary_envs:broken_reset")
    with pytest.raises(EnvironmentFailure, match="ConnectionError"):
        asyncio.run(env.seed(Task(id="b", env=env.name)))
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "b0", "input": "go"}) + "\n")
    run = _eval(rows, "aviary:aviary_envs:broken_reset", "oracle", tmp_path / "run", cwd=adapters_dir)
    got = _rollouts(tmp_path / "run")
    assert run.returncode != 0 and got, run.stdout + run.stderr
    assert {(r["outcome"]["status"], r["outcome"]["kind"]) for r in got} == {("failed", "environment")}
    assert all(r.get("verdict") is None for r in got)


async def test_a_failing_step_is_failed_environment(adapters_dir: Path) -> None:
    env = load_env("aviary:aviary_envs:LostBackend")
    state = await env.seed(Task(id="l", env=env.name))
    try:
        with pytest.raises(EnvironmentFailure, match="lost the connection"):
            await env.call_tool(state, "print_story", {"story": "a b c d e"})
        with pytest.raises(EnvironmentFailure):  # the episode is lost: no verdict, and no further steps
            env.verify(state, Trajectory())
        with pytest.raises(EnvironmentFailure):
            await env.call_tool(state, "cast_float", {"x": "1"})
    finally:
        await env.close(state)


def test_unknown_targets_are_refused_at_selection() -> None:
    from palaestra.core.errors import ConfigError

    with pytest.raises(ConfigError, match="no Aviary environment"):
        load_env_class("aviary:no_such_registered_env")
    with pytest.raises(ConfigError, match="not an Aviary"):
        load_env_class("aviary:json:dumps")
