"""``export nemo-gym``: a run written as NeMo Gym rollouts. The files are read back by NeMo Gym's own code
(its pydantic models of a verify response, its reward profiler, aggregate metrics and pass@k), run from
a NeMo Gym install in a subprocess (skipped where none is installed), and by Palaestra's NeMo Gym row
reader (the materialized inputs are NeMo Gym task rows)."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from palaestra.adapters.nemo_gym import export_nemo_gym
from palaestra.core.records import ModelCallRecord, Outcome, Rollout, Task, Trajectory, Usage, Verdict
from palaestra.rollout.tasks import parse_row, write_tasks

# tests/fixtures/nemo_gym.py: the one place that knows where .ci/setup-nemo-gym.sh installs NeMo Gym
NG = SimpleNamespace(**runpy.run_path(str(Path(__file__).parents[1] / "fixtures" / "nemo_gym.py")))
NG_PYTHON: Path = NG.python_path()
COUNTER = str(Path(__file__).parents[1] / "fixtures" / "counter_env.py") + ":CounterEnv"

# Runs inside NeMo Gym's environment: validate every record with its models, then profile and aggregate.
CHECK = r"""
import json, sys
from nemo_gym.base_resources_server import BaseVerifyResponse
from nemo_gym.reward_profile import RewardProfiler, compute_aggregate_metrics, compute_pass_majority_metrics
from nemo_gym.reward_profile import select_measured, _group_by_task
out, mat = sys.argv[1], sys.argv[2]
results = [json.loads(l) for l in open(out)]
rows = [json.loads(l) for l in open(mat)]
for r in results:
    BaseVerifyResponse.model_validate(r)
rp = RewardProfiler()
aligned = rp.align_rows_and_results(rows, results, allow_partial_rollouts=True)
m_rows, m_results, masked, _ = select_measured(rows, results)
groups, agents, repeats = rp.profile_from_data(m_rows, m_results, allow_partial_rollouts=True)
agg = compute_aggregate_metrics(results)
passk, _, _, max_k = compute_pass_majority_metrics(_group_by_task(results), answer_key="extracted_answer")
print(json.dumps({"validated": len(results), "aligned": len(aligned), "groups": len(groups),
                  "agent_mean_reward": agents[0]["mean/reward"], "agg_mean_reward": agg.agent_metrics["mean/reward"],
                  "agg_mean_passed": agg.agent_metrics.get("mean/passed"), "passk": passk, "max_k": max_k,
                  "completion": rp.profile_completion_summary(rows, results)}))
"""


def nemo_gym_read(out: Path) -> dict[str, Any]:
    reason = NG.missing()  # from files only: never from how the export above went
    if reason is not None:
        pytest.skip(f"nemo-gym: {reason}")  # the capability name PALAESTRA_REQUIRE knows (tests/conftest.py)
    mat = out.with_name(out.stem + "_materialized_inputs.jsonl")
    proc = subprocess.run([str(NG_PYTHON), "-c", CHECK, str(out), str(mat)], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "WANDB_MODE": "disabled"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def rollout(task: str, repeat: int, reward: float | None, *, attempt: int = 0, answer: str = "4") -> Rollout:
    """A rollout as the journal holds it: one tool call, then the answer; token ids on both model calls."""
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"amount": 4}'}}
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Task {task}"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "counter is now 4"},
                {"role": "assistant", "content": answer}]
    params = {"type": "object", "properties": {"amount": {"type": "integer"}}}
    tools = [{"type": "function", "function": {"name": "add", "description": "Add.", "parameters": params}}]
    calls = [ModelCallRecord(request={"messages": messages[:2], "tools": tools, "temperature": 0.5},
                             prompt_token_ids=[1, 2, 3], generation_token_ids=[7, 8], generation_logprobs=[-0.1, -0.2]),
             ModelCallRecord(prompt_token_ids=[1, 2, 3, 7, 8, 9], generation_token_ids=[5], generation_logprobs=[-0.3])]
    scored = reward is not None
    return Rollout(rollout_id=f"{task}-{repeat}-{attempt}", task_id=task, env="counter", agent="tool", model="m",
                   repeat=repeat, attempt=attempt,
                   outcome=Outcome.scored() if scored else Outcome.failed("model", "HTTP 500 from the model"),
                   verdict=Verdict(reward=reward, passed=reward == 1.0, components={"state": reward},
                                   answer=answer) if scored else None,
                   trajectory=Trajectory(messages=messages, model_calls=calls, final_answer=answer),
                   usage=Usage(prompt_tokens=9, completion_tokens=3), started_at=1700000000.0)


def make_run(run: Path, tasks: list[Task], rollouts: list[Rollout]) -> Path:
    run.mkdir()
    write_tasks(run / "tasks.jsonl", tasks)
    with (run / "rollouts.jsonl").open("w") as fh:
        for r in rollouts:
            fh.write(r.model_dump_json() + "\n")
    return run


def test_export_shape_retries_failures_and_tokens(tmp_path: Path) -> None:
    tasks = [Task(id="a", env="counter", input="x", metadata={"target": 4, "expected_answer": "4"}),
             Task(id="b", env="counter", input="y", metadata={"target": 4, "nemo_gym_agent_ref": {"name": "simple"}}),
             Task(id="c", env="counter", input="z", metadata={"target": 4})]
    run = make_run(tmp_path / "run", tasks, [
        rollout("a", 0, 1.0), rollout("a", 1, None), rollout("a", 1, 0.0, attempt=1, answer="5"),
        rollout("b", 0, 1.0), rollout("b", 1, 1.0),
        rollout("c", 0, None), rollout("c", 0, None, attempt=1)])
    out = tmp_path / "ng" / "rollouts.jsonl"
    result = export_nemo_gym(run, out)
    assert (result.scored, result.failed) == (4, 1)

    records = lines(out)
    assert [(r["_ng_task_index"], r["_ng_rollout_index"], r["reward"]) for r in records] == \
        [(0, 0, 1.0), (0, 1, 0.0), (1, 0, 1.0), (1, 1, 1.0)]
    first = records[0]
    assert first["expected_answer"] == "4" and first["target"] == 4  # verifier fields at the top level
    assert first["agent_ref"] == {"name": "tool"} and records[2]["agent_ref"] == {"name": "simple"}
    assert first["passed"] is True and first["reward_components"] == {"state": 1.0} and first["extracted_answer"] == "4"
    params = first["responses_create_params"]
    assert params["input"] == [{"role": "system", "content": "Be brief.", "type": "message"},
                               {"role": "user", "content": "Task a", "type": "message"}]
    assert params["tools"][0]["name"] == "add" and params["temperature"] == 0.5
    output = first["response"]["output"]
    assert [o["type"] for o in output] == ["function_call", "function_call_output", "message"]
    assert output[0]["arguments"] == '{"amount": 4}' and output[1]["call_id"] == output[0]["call_id"] == "c1"
    assert output[0]["generation_token_ids"] == [7, 8] and output[2]["prompt_token_ids"] == [1, 2, 3, 7, 8, 9]
    assert first["response"]["usage"]["total_tokens"] == 12

    inputs = lines(result.materialized_inputs)
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in inputs] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    back = parse_row(inputs[0], "L1", "counter")  # a NeMo Gym task row Palaestra reads back as the same task
    assert back.id == "a" and back.metadata["expected_answer"] == "4" and back.messages()[1]["content"] == "Task a"
    assert result.failures is not None
    [failure] = lines(result.failures)
    assert failure["_ng_task_index"] == 2 and failure["_ng_failure_class"] == "palaestra_model"
    assert "reward" not in failure  # an infrastructure failure is not a zero

    ng = nemo_gym_read(out)
    assert ng["validated"] == 4 and ng["aligned"] == 4 and ng["groups"] == 2
    assert ng["agg_mean_reward"] == pytest.approx(0.75) and ng["agg_mean_passed"] == pytest.approx(0.75)
    assert ng["max_k"] == 2 and ng["passk"]["pass@2/accuracy"] == pytest.approx(100.0)
    assert ng["passk"]["pass@1[avg-of-2]/accuracy"] == pytest.approx(75.0)
    assert ng["completion"]["missing_rollout_rows"] == 1  # the failed slot: missing, not scored 0


async def test_a_real_run_exports_and_nemo_gym_reads_it(tmp_path: Path) -> None:
    from palaestra.cli.adapt_cmds import export_app
    from palaestra.orchestrator import run_eval
    from palaestra.rollout.config import RunConfig

    rows = tmp_path / "tasks.jsonl"
    rows.write_text("".join(json.dumps({"id": f"k{i}", "env": "counter", "input": f"Reach {i + 2}.",
                                        "metadata": {"start": 0, "target": i + 2}}) + "\n" for i in range(3)))
    from palaestra.envs.registry import load_env_class

    load_env_class(COUNTER)
    await run_eval(RunConfig(input=str(rows), model="scripted:oracle", out=str(tmp_path / "run"), repeats=2))

    from typer.testing import CliRunner

    out = tmp_path / "rollouts.jsonl"
    res = CliRunner().invoke(export_app, [str(tmp_path / "run"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "wrote 6 scored rollouts" in res.output
    records = lines(out)
    assert {r["reward"] for r in records} == {1.0}
    calls = [o for o in records[0]["response"]["output"] if o["type"] == "function_call"]
    assert calls and calls[0]["name"] == "add"
    ng = nemo_gym_read(out)
    assert ng["validated"] == 6 and ng["groups"] == 3 and ng["agent_mean_reward"] == pytest.approx(1.0)


def test_not_a_run_directory(tmp_path: Path) -> None:
    from palaestra.core.errors import InvalidTask

    with pytest.raises(InvalidTask, match="not a run directory"):
        export_nemo_gym(tmp_path, tmp_path / "out.jsonl")
