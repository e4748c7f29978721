"""``export nemo-gym`` with NeMo Gym's observability records (``ng_trajectory`` v1.0, ``ng_model_call_capture``),
read back by NeMo Gym's own code from its install (a subprocess with its Python; skipped only where the
locator finds none): its pydantic models of the trajectory and of a captured model call, its collector's
trajectory projection (which re-derives the ids and must find nothing to repair), its strict ATIF
exporter, its reward profiler, and ``gym eval reverify``, which starts NeMo Gym's own mcqa resources
server on 127.0.0.1 and re-scores every exported rollout."""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from palaestra.adapters.nemo_gym import export_nemo_gym
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig
from palaestra.server.loopback import serve_app
from palaestra.server.ports import free_port

pytestmark = pytest.mark.timeout(900)

NG = SimpleNamespace(**runpy.run_path(str(Path(__file__).parents[1] / "fixtures" / "nemo_gym.py")))
AGENT = "mcqa_simple_agent"  # the agent NeMo Gym's mcqa config routes to its mcqa resources server

# Runs inside NeMo Gym's environment: every record through its models, projection, ATIF export and profiler.
CHECK = r"""
import json, sys
from nemo_gym.atif_export import gym_rollout_to_atif
from nemo_gym.base_resources_server import BaseVerifyResponse
from nemo_gym.base_responses_api_model import ModelCallRecord
from nemo_gym.openai_utils import RESPONSES_TO_TRAIN, NeMoGymResponseOutputMessageForTraining
from nemo_gym.reward_profile import RewardProfiler, select_measured
from nemo_gym.rollout_collection import _build_trajectory_record
from nemo_gym.rollout_observability import TrajectoryRecord
out, mat = sys.argv[1], sys.argv[2]
results = [json.loads(l) for l in open(out)]
rows = [json.loads(l) for l in open(mat)]
by_key = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in rows}
report = []
for r in results:
    BaseVerifyResponse.model_validate(r)
    traj = TrajectoryRecord.model_validate(r["ng_trajectory"], strict=True)
    calls = [ModelCallRecord.model_validate(c) for c in r["ng_model_call_capture"]["calls"]]
    projected = _build_trajectory_record(by_key[(r["_ng_task_index"], r["_ng_rollout_index"])], r)
    atif = gym_rollout_to_atif(r, session_id=traj.rollout_id, agent_version="test")
    trained = []
    for call in traj.model_calls:
        for item in (call.response or {}).get("output", []):
            if "generation_token_ids" in item:
                trained.append(NeMoGymResponseOutputMessageForTraining.model_validate(item).generation_token_ids
                               if item.get("type") == "message" else item["generation_token_ids"])
    report.append({"rollout_id": traj.rollout_id, "turns": len(traj.turns), "model_calls": len(traj.model_calls),
                   "tool_calls": [(t.tool_name, t.status, t.duration_ms is not None) for t in traj.tool_calls],
                   "captured": len(calls), "gaps": [g.code for g in projected.gaps],
                   "projected_turns": len(projected.turns), "atif_steps": len(atif.steps), "trained": trained})
rp = RewardProfiler()
m_rows, m_results, _, _ = select_measured(rows, results)
groups, agents, _ = rp.profile_from_data(m_rows, m_results, allow_partial_rollouts=True)
print(json.dumps({"records": report, "agent_mean_reward": agents[0]["mean/reward"], "groups": len(groups)}))
"""


def nemo_gym() -> Path:
    reason = NG.missing()  # from files only: never from how the export went
    if reason is not None:
        pytest.skip(f"nemo-gym: {reason}")
    return Path(NG.venv_dir())


def nemo_read(out: Path) -> dict[str, Any]:
    venv = nemo_gym()
    mat = out.with_name(out.stem + "_materialized_inputs.jsonl")
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", CHECK, str(out), str(mat)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "WANDB_MODE": "disabled"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def stop_session(proc: subprocess.Popen[bytes]) -> None:
    """Stop the process group this test started (gym, its servers, Ray), by its id: TERM, then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:
            try:  # the leader is gone; its servers may not be
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return


def reverify(out: Path, work: Path, model_url: str) -> dict[tuple[int, int], float]:
    """``gym eval reverify`` against NeMo Gym's mcqa resources server, which it starts itself (head server,
    servers and Ray all on 127.0.0.1); the model endpoint it waits for is a loopback stub it never calls."""
    venv = nemo_gym()
    servers = venv.parent / (venv.name + "-servers")
    if not (servers / "resources_servers" / "mcqa" / ".venv").is_dir():
        pytest.skip(f"nemo-gym: the mcqa server venv under {servers} is not built (run bench/side_by_side.py once)")
    home = next((line.partition("=")[2].strip() for line in (venv / "pyvenv.cfg").read_text().splitlines()
                 if line.partition("=")[0].strip() == "home"), "")
    work.mkdir(parents=True, exist_ok=True)
    (work / "env.yaml").write_text(
        f"policy_base_url: {model_url}\npolicy_api_key: unused\npolicy_model_name: unused\n"
        f"uv_venv_dir: {servers}\nuv_cache_dir: {venv.parent / 'uv-cache'}\ndefault_host: 127.0.0.1\n"
        f"head_server:\n  host: 127.0.0.1\n  port: {free_port()}\n")
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST", "VIRTUAL_ENV", "COV"))}
    ours = {str(Path(sys.prefix) / "bin")}  # never Palaestra's venv: gym finds its own uv and Python
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in ours]
    env = {**inherited, "PATH": os.pathsep.join([str(venv / "bin"), *([home] if home else []), *path]),
           "UV_PYTHON_DOWNLOADS": "never", "UV_OFFLINE": "1", "WANDB_MODE": "disabled", "VIRTUAL_ENV": str(venv),
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # keeps Ray on 127.0.0.1, as bench/side_by_side.py does
    result = work / "reverified.jsonl"
    cmd = [str(venv / "bin" / "gym"), "eval", "reverify", "--resources-server", "mcqa", "--model-type",
           "openai_model", "--inputs", str(out.with_name(out.stem + "_materialized_inputs.jsonl")),
           "--rollouts", str(out), "--output", str(result)]
    with (work / "reverify.log").open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait(timeout=300)
    finally:
        stop_session(proc)
    assert proc.returncode == 0, (work / "reverify.log").read_text(errors="replace")[-4000:]
    return {(r["_ng_task_index"], r["_ng_rollout_index"]): r["reward"]
            for r in map(json.loads, result.read_text().splitlines())}


def mcqa_rows(path: Path, n: int) -> Path:
    """The first ``n`` rows of NeMo Gym's own mcqa example file, routed to its mcqa agent."""
    venv = nemo_gym()
    [example] = venv.glob("lib/python3*/site-packages/resources_servers/mcqa/data/example.jsonl")
    rows = [json.loads(line) for line in example.read_text().splitlines()[:n]]
    path.write_text("".join(json.dumps({**row, "agent_ref": {"type": "responses_api_agents", "name": AGENT}}) + "\n"
                            for row in rows))
    return path


def exported(run: Path) -> tuple[Path, list[dict[str, Any]], float]:
    out = run.parent / (run.name + "_ng") / "rollouts.jsonl"
    export_nemo_gym(run, out)
    metrics = json.loads((run / "metrics.json").read_text())
    records = [json.loads(line) for line in out.read_text().splitlines()]
    rewards = [r["reward"] for r in records]
    assert metrics and rewards
    return out, records, sum(rewards) / len(rewards)


async def _chat(request: Request) -> JSONResponse:
    """A vLLM-like model: always ``\\boxed{B}``, with token ids and logprobs when asked for them."""
    body = await request.json()
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": "\\boxed{B}"}}
    out: dict[str, Any] = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
                           "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
    if body.get("return_token_ids"):
        out["prompt_token_ids"] = [11, 12, 13, 14, 15]
        choice["token_ids"] = [7, 8, 9]
    if body.get("logprobs"):
        choice["logprobs"] = {"content": [{"token": t, "logprob": -0.25, "top_logprobs": []} for t in "abc"]}
    return JSONResponse(out)


async def _models(request: Request) -> JSONResponse:
    return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    app = Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"]), Route("/v1/models", _models)])
    with serve_app(app, path="/v1") as url:
        yield url


async def test_mcqa_oracle_export_is_profiled_and_reverified_by_nemo_gym(tmp_path: Path, model_url: str) -> None:
    rows = mcqa_rows(tmp_path / "rows.jsonl", 3)
    await run_eval(RunConfig(input=str(rows), model="scripted:oracle", out=str(tmp_path / "run"), repeats=2))
    out, records, mean = exported(tmp_path / "run")
    assert len(records) == 6 and {r["agent_ref"]["name"] for r in records} == {AGENT}
    first = records[0]["ng_trajectory"]
    assert first["schema_version"] == "1.0" and first["rollout_id"] == "0-0" and first["task_id"] == "0"
    assert records[0]["ng_model_call_capture"]["metrics"]["num_calls"] == 1

    ng = nemo_read(out)
    assert ng["agent_mean_reward"] == pytest.approx(mean) and ng["groups"] == 3
    for rec in ng["records"]:
        assert rec["turns"] == rec["model_calls"] == rec["captured"] == 1 and rec["tool_calls"] == []
        assert rec["gaps"] == [] and rec["projected_turns"] == 1 and rec["atif_steps"] >= 2

    ours = {(r["_ng_task_index"], r["_ng_rollout_index"]): r["reward"] for r in records}
    assert reverify(out, tmp_path / "reverify", model_url) == ours


async def test_multi_turn_tool_env_exports_turns_tool_calls_and_timings(tmp_path: Path) -> None:
    await run_eval(RunConfig(env="workplace", limit=2, model="scripted:oracle", out=str(tmp_path / "wp")))
    out, records, mean = exported(tmp_path / "wp")
    journal = [json.loads(line) for line in (tmp_path / "wp" / "rollouts.jsonl").read_text().splitlines()]
    tool_counts = sorted(len(r["trajectory"]["tool_calls"]) for r in journal)
    assert tool_counts[0] >= 1  # a multi-turn run: the oracle calls tools before it answers
    for rec in records:
        traj = rec["ng_trajectory"]
        conversation = traj["invocations"][0]["conversation"]
        call_ids = [it["call_id"] for it in conversation if it["type"] == "function_call"]
        assert [t["tool_call_id"] for t in traj["tool_calls"]] == call_ids
        assert all(t["completed_at"] >= t["started_at"] for t in traj["tool_calls"])
        assert [t["turn_no"] for t in traj["turns"]] == list(range(1, len(traj["model_calls"]) + 1))
        assert traj["turns"][-1]["resolved"] is (rec["reward"] == 1.0)

    ng = nemo_read(out)
    assert ng["agent_mean_reward"] == pytest.approx(mean)
    assert sorted(len(r["tool_calls"]) for r in ng["records"]) == tool_counts
    for rec in ng["records"]:
        assert rec["gaps"] == [] and rec["turns"] == rec["model_calls"] == rec["captured"] == rec["projected_turns"]
        assert all(status == "completed" and timed for _, status, timed in rec["tool_calls"])
        assert rec["model_calls"] == len(rec["tool_calls"]) + 1


async def test_token_ids_reach_the_trajectory_and_reverify_agrees(tmp_path: Path, model_url: str) -> None:
    rows = mcqa_rows(tmp_path / "rows.jsonl", 4)
    await run_eval(RunConfig(input=str(rows), model=model_url, capture_tokens=True, out=str(tmp_path / "tok")))
    out, records, mean = exported(tmp_path / "tok")
    assert {r["reward"] for r in records} == {0.0, 1.0}  # "B" is right for some rows only: reverify has work
    call = records[0]["ng_trajectory"]["model_calls"][0]
    last = call["response"]["output"][-1]
    assert last["prompt_token_ids"] == [11, 12, 13, 14, 15] and last["generation_token_ids"] == [7, 8, 9]
    assert last["generation_log_probs"] == [-0.25, -0.25, -0.25]

    ng = nemo_read(out)
    assert [r["trained"] for r in ng["records"]] == [[[7, 8, 9]]] * len(records)
    assert ng["agent_mean_reward"] == pytest.approx(mean)
    ours = {(r["_ng_task_index"], r["_ng_rollout_index"]): r["reward"] for r in records}
    assert reverify(out, tmp_path / "reverify", model_url) == ours
