"""NeMo Gym's own agent server as a Palaestra harness (``adapters/nemo_gym_agent.py``).

Without NeMo Gym: the rollout prefix of NeMo Gym's model calls reaches the model app's own prefix, the
verdict is the reward the agent's ``/run`` answered (and a trajectory without one is an environment
failure, not a zero), the harness is a registered agent. With the installed wheel, end to end under
Palaestra's collector: a SciCode row (empty input) is routed to NeMo Gym's ``scicode_agent`` on its own,
which asks the run's model once per sub-step (every call in the trajectory) and reaches SciCode's verify;
and NeMo Gym's ``simple_agent`` runs a row with tools and per-session state on its resources server,
scored by that server's verify.
"""

from __future__ import annotations

import asyncio
import runpy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

NG = SimpleNamespace(**runpy.run_path(str(Path(__file__).parents[1] / "fixtures" / "nemo_gym.py")))
needs_nemo = pytest.mark.skipif(NG.missing() is not None, reason=f"nemo-gym: {NG.missing()}")


def test_nemo_gym_rollout_prefix_reaches_the_model_apps_rollout_route() -> None:
    from palaestra.adapters.nemo_gym_agent import _rollout_prefix

    seen: list[tuple[str, bytes]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((scope["path"], scope["raw_path"]))

    wrapped = _rollout_prefix(app)
    asyncio.run(
        wrapped(
            {"type": "http", "path": "/ng-rollout/r-1/v1/responses", "raw_path": b"/ng-rollout/r-1/v1/responses"},
            None,
            None,
        )
    )
    asyncio.run(wrapped({"type": "http", "path": "/v1/responses", "raw_path": b"/v1/responses"}, None, None))
    assert seen == [("/rollouts/r-1/v1/responses", b"/rollouts/r-1/v1/responses"), ("/v1/responses", b"/v1/responses")]


def test_the_verdict_is_the_reward_nemo_gyms_run_answered_and_none_is_no_zero() -> None:
    from palaestra.adapters.nemo_gym_server import AGENT_RUN_KEY, agent_driven, agent_verdict
    from palaestra.core.errors import EnvironmentFailure
    from palaestra.core.records import Task, Trajectory

    traj = Trajectory.model_validate(
        {"final_answer": "6", AGENT_RUN_KEY: {"reward": 1.0, "num_steps_passed": 3, "response": {"output": []}}}
    )
    verdict = agent_verdict("scicode", traj)
    assert (verdict.reward, verdict.passed, verdict.answer) == (1.0, True, "6")
    assert verdict.metadata["num_steps_passed"] == 3 and "response" not in verdict.metadata
    with pytest.raises(EnvironmentFailure, match="lacks"):
        agent_verdict("scicode", Trajectory(final_answer="6"))
    assert agent_driven(Task(id="t", env="nemo_gym:scicode", agent="nemo-gym:scicode_agent?timeout_s=9"))
    assert not agent_driven(Task(id="t", env="nemo_gym:scicode", agent="tool"))


def test_the_harness_is_a_registered_agent_and_rows_with_input_keep_the_runs_agent() -> None:
    from palaestra.adapters.nemo_gym_agent import NemoGymAgent
    from palaestra.adapters.nemo_gym_families import row_agent
    from palaestra.agents.registry import make_agent

    agent = make_agent("nemo-gym:scicode_agent?timeout_s=30&config=a.yaml,b.yaml")
    assert isinstance(agent, NemoGymAgent) and agent.name == "nemo-gym"
    assert (agent.agent_type, agent.timeout_s, agent.configs) == ("scicode_agent", 30.0, ("a.yaml", "b.yaml"))
    assert row_agent("nemo_gym:scicode", None, has_input=True) is None  # its prompt is the row's: any agent
    assert row_agent("mcqa", None, has_input=False) is None  # a native environment


def test_a_server_that_dies_at_start_is_named_by_its_exception_line() -> None:
    from palaestra.adapters.nemo_gym_agent_launch import log_cause

    log = (
        '(legal_h) Traceback (most recent call last):\n(legal_h)   File "x.py", line 1\n'
        "(legal_h) ModuleNotFoundError: No module named 'harbor'\n(legal_h) \n(legal_h) repr(e): nothing\n"
    )
    assert log_cause(log) == "ModuleNotFoundError: No module named 'harbor'"
    pyd = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for Agent\n"
        "  Value error, persist_deliverables_dir must be an absolute path\n  For further information visit x\n"
    )
    assert log_cause(pyd).endswith("Agent Value error, persist_deliverables_dir must be an absolute path")
    assert log_cause("starting\nbye\n") == "bye" and log_cause("") == "(no output)"


def _example_rows(server: str, n: int) -> bytes:
    path = next(Path(NG.venv_dir()).glob(f"lib/python3*/site-packages/resources_servers/{server}/data/example.jsonl"))
    return b"".join(line + b"\n" for line in path.read_bytes().splitlines()[:n])


def _run(tmp_path: Path, server: str, agent: str | None = None) -> list[dict[str, Any]]:
    from palaestra.core.records import Task
    from palaestra.orchestrator import run_eval
    from palaestra.rollout import rundir
    from palaestra.rollout.config import RunConfig
    from palaestra.rollout.expand import expand_record
    from palaestra.rollout.journal_read import read_journal

    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(_example_rows(server, 1))
    cfg = RunConfig.model_validate(
        {
            "input": str(rows),
            "env": f"nemo_gym:{server}",
            "model": "scripted:oracle",
            "max_attempts": 1,
            "out": str(tmp_path / "run"),
            "min_coverage": 0.0,
            **({"agent": agent} if agent else {}),
        }
    )
    asyncio.run(run_eval(cfg))
    records, _ = read_journal(tmp_path / "run" / rundir.JOURNAL, missing_ok=True)
    tasks = [
        Task.model_validate(orjson.loads(line)) for line in (tmp_path / "run" / "tasks.jsonl").read_bytes().splitlines()
    ]
    return [expand_record(r, {t.id: t for t in tasks}) for r in records]


@needs_nemo
def test_a_scicode_row_runs_nemo_gyms_scicode_agent_by_itself(tmp_path: Path) -> None:
    """No --agent: the row's empty input routes it to NeMo Gym's agent, which builds one prompt per
    sub-step; every call is the rollout's. SciCode's verify needs test_data.h5 (not shipped, ~1 GB):
    the rollout is failed(environment) saying so, never a zero."""
    from palaestra.rollout.tasks import load_task_file

    (tmp_path / "probe.jsonl").write_bytes(_example_rows("scicode", 1))
    task = load_task_file(tmp_path / "probe.jsonl", "nemo_gym:scicode").tasks[0]
    assert task.agent == "nemo-gym"
    steps = len(task.metadata["sub_steps"])
    (record,) = _run(tmp_path, "scicode")
    assert record["agent"] == "nemo-gym"
    assert record["outcome"]["status"] == "failed" and record["outcome"]["kind"] == "environment"
    assert "test_data_fpath" in record["outcome"]["message"]
    calls = record["trajectory"]["model_calls"]
    assert len(calls) == steps and all(c["status"] == 200 and c["response"] for c in calls)
    first = calls[0]["request"]["messages"][0]["content"]  # NeMo Gym's own prompt, built from the row
    assert "NEXT STEP - PROBLEM STEP AND FUNCTION HEADER" in str(first)


@needs_nemo
def test_nemo_gyms_simple_agent_scores_a_row_with_tools_and_session_state(tmp_path: Path) -> None:
    """--agent nemo-gym on a row that has its prompt: NeMo Gym's simple_agent calls the counter's tools on
    its resources server (one session, by cookie) and that server's verify scores the count."""
    (record,) = _run(tmp_path, "example_session_state_mgmt", agent="nemo-gym")
    assert record["outcome"]["status"] == "scored", record["outcome"]
    assert record["verdict"]["reward"] == 1.0
    traj = record["trajectory"]
    assert [c["function"]["name"] for m in traj["messages"] for c in m.get("tool_calls") or []] == [
        "increment_counter",
        "get_counter_value",
    ]
    assert len(traj["model_calls"]) == 3 and traj["harness"]["agent_type"] == "simple_agent"
