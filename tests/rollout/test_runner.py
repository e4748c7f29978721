"""One rollout end to end: tool agent + model proxy + environment, with every failure typed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.records import Task, Trajectory, Verdict
from palaestra.models.scripted import ScriptedBackend
from palaestra.placement import mount_env
from palaestra.rollout.agent_server import create_agent_app
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

TASK = Task(id="t1", env="counter", input="Bring the counter from 0 to 150.", metadata={"start": 0, "target": 150})


@pytest.fixture
async def counter(counter_spec: str):
    mounted = await mount_env(counter_spec, "inprocess")
    yield mounted.client
    await mounted.stop()


async def _run(env: Any, backend: Any, **kw: Any):
    return await run_rollout(TASK, env=env, agent=kw.pop("agent", ToolAgent()), proxy=ModelProxy(backend),
                             model_name="scripted", **kw)


async def test_oracle_rollout_scores_and_records_everything(counter: Any) -> None:
    r = await _run(counter, ScriptedBackend("oracle"), with_reference=True)
    assert r.outcome.status == "scored" and r.verdict is not None
    assert r.verdict.reward == 1.0 and r.verdict.passed
    traj = r.trajectory
    assert [c.arguments for c in traj.tool_calls] == [{"amount": 100}, {"amount": 50}]
    assert all(c.status == "ok" and c.duration_s >= 0 for c in traj.tool_calls)
    assert len(traj.model_calls) == 3 and traj.steps == 3 and traj.stop_reason == "final"
    assert traj.model_calls[0].request["tools"] and traj.model_calls[-1].response is not None
    assert [m["role"] for m in traj.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert traj.final_answer == "150"
    assert r.usage.model_calls == 3 and r.usage.tool_calls == 2 and r.usage.prompt_tokens > 0
    assert set(r.timings) >= {"seed_s", "agent_s", "verify_s", "close_s", "total_s"}
    assert (await counter.health())["sessions"] == 0


async def test_null_policy_scores_zero(counter: Any) -> None:
    r = await _run(counter, ScriptedBackend("null"))
    assert r.outcome.status == "scored" and r.verdict is not None and r.verdict.reward == 0.0


async def test_model_failure_is_failed_not_zero(counter: Any) -> None:
    r = await _run(counter, ScriptedBackend("oracle", failure_rate=1.0), with_reference=True)
    assert r.outcome.status == "failed" and r.outcome.kind == "model"
    assert r.verdict is None and r.reward is None
    assert r.trajectory.model_calls and r.trajectory.model_calls[0].error is not None
    assert (await counter.health())["sessions"] == 0


async def test_deadline_gives_timed_out(counter: Any) -> None:
    r = await _run(counter, ScriptedBackend("oracle", latency_ms=300), with_reference=True, deadline_s=0.5)
    assert r.outcome.status == "timed_out" and "agent" in (r.outcome.message or "")
    assert r.verdict is None


async def test_parallel_and_malformed_tool_calls_become_tool_messages(counter: Any) -> None:
    def call(i: int, name: str, args: str) -> dict[str, Any]:
        return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": args}}

    replay = [
        {"content": None, "tool_calls": [call(1, "add", '{"amount": 100}'), call(2, "add", '{"amount": 50}'),
                                         call(3, "add", "{amount: oops"), call(4, "nope", "{}"),
                                         call(5, "add", '{"amount": 1000}')]},
        {"content": "150"},
    ]
    r = await _run(counter, ScriptedBackend("replay", replay=replay))
    assert r.verdict is not None and r.verdict.reward == 1.0
    tool_msgs = [m for m in r.trajectory.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["c1", "c2", "c3", "c4", "c5"]
    assert tool_msgs[2]["content"].startswith("Error (bad_arguments)")
    assert tool_msgs[3]["content"].startswith("Error (unknown_tool)")
    assert tool_msgs[4]["content"].startswith("Error (tool_error)") and "Hint:" in tool_msgs[4]["content"]
    assert r.trajectory.parse_failures == 1
    assert [c.status for c in r.trajectory.tool_calls] == ["ok", "ok", "error", "error", "error"]


async def test_step_limit(counter: Any) -> None:
    replay = [{"tool_calls": [{"id": "x", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}]
    r = await _run(counter, ScriptedBackend("replay", replay=replay), agent=ToolAgent(max_steps=4))
    assert r.trajectory.steps == 4 and r.trajectory.stop_reason == "max_steps"
    assert r.outcome.status == "scored" and r.verdict is not None and r.verdict.reward == 0.0


async def test_verifier_crash_is_failed_verifier(counter_spec: str) -> None:
    from palaestra.envs.registry import load_env_class

    cls = load_env_class(counter_spec)

    class Broken(cls):  # type: ignore[misc,valid-type]
        name = "counter"

        def verify(self, state: Any, trajectory: Trajectory) -> Verdict:
            raise ZeroDivisionError("bad verifier")

    mounted = await mount_env(Broken(), "inprocess")
    try:
        r = await _run(mounted.client, ScriptedBackend("oracle"), with_reference=True)
    finally:
        await mounted.stop()
    assert r.outcome.status == "failed" and r.outcome.kind == "verifier"
    assert "ZeroDivisionError" in (r.outcome.message or "")


async def test_agent_server_runs_a_rollout_over_http(counter_spec: str) -> None:
    """POST /run against an env server and a model server, both real processes/servers on loopback."""
    from palaestra.server.loopback import serve_app
    from palaestra.server.model_app import create_model_app

    env = await mount_env(counter_spec, "local")
    try:
        with serve_app(create_model_app(ModelProxy(ScriptedBackend("constant", constant_text="150"))),
                       path="/v1") as model_url:
            await _run_over_http(env, model_url)
    finally:
        await env.stop()


async def _run_over_http(env: Any, model_url: str) -> None:
    """The agent server's /run with a real env server and model server; a bad request is a 400."""
    app = create_agent_app()
    async with app.router.lifespan_context(app), \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as c:
        resp = await c.post("/run", json={"task": TASK.model_dump(), "env_url": env.base_url,
                                          "env_token": env.token, "model_base_url": model_url},
                            timeout=30)
        body = resp.json()
        assert resp.status_code == 200, body
        assert body["outcome"]["status"] == "scored", body["outcome"]
        assert body["verdict"]["components"] == {"state": 0.0, "answer": 1.0}
        assert len(body["trajectory"]["model_calls"]) == 1
        bad = await c.post("/run", json={"task": TASK.model_dump()})
        assert bad.status_code == 400 and bad.json()["error"]["kind"] == "bad_request"


async def test_a_finished_rollout_leaves_nothing_in_the_proxy(counter: Any) -> None:
    """The proxy holds a rollout's context and calls only while it runs: a run of any length keeps none
    of its finished rollouts (scored or failed) registered."""
    proxy = ModelProxy(ScriptedBackend("oracle", failure_rate=0.5, seed=3))
    rollouts = [await run_rollout(TASK, env=counter, agent=ToolAgent(), proxy=proxy, model_name="scripted",
                                  with_reference=True, repeat=i) for i in range(12)]
    assert {r.outcome.status for r in rollouts} == {"scored", "failed"}
    assert all(r.trajectory.model_calls for r in rollouts)
    assert proxy._contexts == {} and dict(proxy._calls) == {}
