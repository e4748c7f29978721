"""The LangGraph adapter with the real ``langgraph`` package: graphs drive the counter environment
through ToolSurface, every LLM call goes through the rollout's model proxy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("langgraph", reason="langgraph: the [langgraph] extra is not installed")

from langchain_core.messages import SystemMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from palaestra.agents.langgraph_agent import LangGraphAgent, langgraph_agent
from palaestra.core.errors import ConfigError
from palaestra.core.records import Rollout, Task
from palaestra.models.scripted import ScriptedBackend
from palaestra.placement import mount_env
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

TASK = Task(id="t1", env="counter", input="Bring the counter from 0 to 150.", metadata={"start": 0, "target": 150})


@pytest.fixture
async def counter(counter_spec: str) -> AsyncIterator[Any]:
    mounted = await mount_env(counter_spec, "inprocess")
    yield mounted.client
    await mounted.stop()


async def _run(env: Any, agent: Any, backend: Any, **kw: Any) -> Rollout:
    return await run_rollout(TASK, env=env, agent=agent, proxy=ModelProxy(backend), model_name="scripted", **kw)


async def test_default_graph_plays_the_oracle_to_full_reward(counter: Any) -> None:
    r = await _run(counter, langgraph_agent(), ScriptedBackend("oracle"), with_reference=True,
                   sampling={"temperature": 0.0})
    assert r.outcome.status == "scored", r.outcome.message
    assert r.verdict is not None and r.verdict.reward == 1.0 and r.verdict.passed
    traj = r.trajectory
    assert [(c.name, c.arguments, c.call_id) for c in traj.tool_calls] == [
        ("add", {"amount": 100}, "call_oracle_0"), ("add", {"amount": 50}, "call_oracle_1")]
    assert len(traj.model_calls) == 3 and all(c.request["temperature"] == 0.0 for c in traj.model_calls)
    assert traj.model_calls[0].request["tools"][0]["function"]["name"] == "add"
    assert [m["role"] for m in traj.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert traj.messages[2]["content"] == "counter is now 100" and traj.messages[2]["tool_call_id"] == "call_oracle_0"
    assert traj.final_answer == "150" and traj.steps == 3 and traj.stop_reason == "final"
    assert (await counter.health())["sessions"] == 0


async def test_users_own_graph_runs_with_our_model_and_tools(counter: Any) -> None:
    seen: list[int] = []

    def build(llm: Any, tools: list[Any]) -> Any:
        bound = llm.bind_tools(tools)

        async def think(state: MessagesState) -> dict[str, Any]:
            prompt = [SystemMessage("Use the add tool."), *state["messages"]]
            return {"messages": [await bound.ainvoke(prompt)]}

        def audit(state: MessagesState) -> dict[str, Any]:
            seen.append(len(state["messages"]))
            return {}

        graph = StateGraph(MessagesState)
        graph.add_node("think", think)
        graph.add_node("act", ToolNode(tools))
        graph.add_node("audit", audit)
        graph.add_edge(START, "think")
        graph.add_conditional_edges("think", tools_condition, {"tools": "act", "__end__": "__end__"})
        graph.add_edge("act", "audit")
        graph.add_edge("audit", "think")
        return graph.compile()

    r = await _run(counter, LangGraphAgent(build, name="my-graph"), ScriptedBackend("oracle"), with_reference=True)
    assert r.outcome.status == "scored" and r.verdict is not None and r.verdict.reward == 1.0
    assert seen == [3, 5] and r.agent == "my-graph"
    assert r.trajectory.model_calls[0].request["messages"][0] == {"role": "system", "content": "Use the add tool."}


async def test_parallel_calls_reach_the_env_in_the_models_order(counter: Any) -> None:
    turn = {"tool_calls": [{"name": "add", "arguments": {"amount": 100}}, {"name": "read", "arguments": {}},
                           {"name": "add", "arguments": {"amount": 50}}, {"name": "add", "arguments": {"amount": 500}}]}
    r = await _run(counter, langgraph_agent(), ScriptedBackend("replay", replay=[turn, {"content": "150"}]))
    assert r.outcome.status == "scored" and r.verdict is not None and r.verdict.passed
    records = r.trajectory.tool_calls
    assert [c.name for c in records] == ["add", "read", "add", "add"]
    assert records[1].output == {"value": 100} and records[3].status == "error"
    tool_texts = [m["content"] for m in r.trajectory.messages if m["role"] == "tool"]
    assert tool_texts[3].startswith("Error (tool_error): amount 500 is too large")  # errors are read, not raised


async def test_step_limit_ends_a_looping_graph(counter: Any) -> None:
    loop = [{"tool_calls": [{"name": "read", "arguments": {}}]}]
    r = await _run(counter, langgraph_agent(max_steps=2), ScriptedBackend("replay", replay=loop))
    assert r.outcome.status == "scored" and r.trajectory.stop_reason == "max_steps"
    assert r.trajectory.final_answer is None and len(r.trajectory.model_calls) <= 3


async def test_model_failure_is_failed_not_zero(counter: Any) -> None:
    r = await _run(counter, langgraph_agent(), ScriptedBackend("oracle", failure_rate=1.0), with_reference=True)
    assert r.outcome.status == "failed" and r.outcome.kind == "model" and r.verdict is None


def test_graph_spec_errors_name_the_fix() -> None:
    with pytest.raises(ConfigError, match="module:function"):
        langgraph_agent(graph="no_colon")
    with pytest.raises(ConfigError, match="cannot load graph builder"):
        langgraph_agent(graph="palaestra.nope:build")
    agent = langgraph_agent(graph="palaestra.agents.langgraph_agent:react_graph")
    assert agent.name == "langgraph"
