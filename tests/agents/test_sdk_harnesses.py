"""Agent SDKs (openai-agents, smolagents, strands-agents), for real: each SDK's own loop over HTTP to the
rollout's loopback model endpoint, the scripted model behind a real ModelProxy, the files environment's
tools as SDK tools. Each test asserts a scored, passed rollout whose model calls were all captured (what
the scripted model served equals the trajectory's model calls) and that the tool call reached the
environment."""

from __future__ import annotations

from typing import Any

import pytest

from palaestra.agents.sdk import SDK_AGENTS
from palaestra.core.records import Task
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

from .conftest import SHELL_STEP, CountingScripted

TASK = Task(
    id="sdk-files", env="files", input="Create made.txt from notes.txt plus a line 'hi', and delete old.txt.",
    metadata={"files": {"notes.txt": "seeded\n", "old.txt": "stale\n"},
              "expect": {"made.txt": "seeded\nhi\n", "notes.txt": "seeded\n"}, "absent": ["old.txt"]},
)
STEP = {"content": "", "tool_calls": [{"name": "run", "arguments": {"cmd": SHELL_STEP}}]}
DONE = "made.txt is written and old.txt is gone."
# Each SDK's way of finishing: a plain answer, or smolagents' own final_answer tool.
REPLAYS: dict[str, list[dict[str, Any]]] = {
    "openai-agents": [STEP, {"content": DONE}],
    "smolagents": [STEP, {"content": "", "tool_calls": [{"name": "final_answer", "arguments": {"answer": DONE}}]}],
    "strands-agents": [STEP, {"content": DONE}],
}


def require_sdk(name: str) -> None:
    cls = SDK_AGENTS[name]
    if not cls.available():
        pytest.skip(f"sdk: {cls.distribution} is not installed (pip install 'palaestra[sdk]')")


@pytest.mark.parametrize("name", sorted(SDK_AGENTS))
async def test_sdk_harness_runs_its_own_loop_through_the_proxy(name: str, files_env: Any) -> None:
    require_sdk(name)
    backend = CountingScripted("replay", replay=REPLAYS[name])
    proxy = ModelProxy(backend)
    agent = SDK_AGENTS[name](max_steps=6)
    r = await run_rollout(TASK, env=files_env, agent=agent, proxy=proxy, model_name="scripted", deadline_s=120)
    assert r.outcome.status == "scored", r.outcome.message
    traj = r.trajectory
    assert backend.served == len(traj.model_calls) == 2  # nothing the SDK sent escaped the record
    assert all(c.response is not None and c.api == "chat" for c in traj.model_calls)
    first = traj.model_calls[0].request
    assert "run" in {t["function"]["name"] for t in first.get("tools") or []}  # the env's tools, offered
    assert "did-it" in str(traj.model_calls[1].request["messages"])  # the tool ran; its output reached the model
    assert [t.name for t in traj.tool_calls] == ["run"] and traj.tool_calls[0].arguments == {"cmd": SHELL_STEP}
    assert traj.final_answer is not None and "made.txt is written" in traj.final_answer
    assert traj.stop_reason == "final"
    harness = traj.model_extra["harness"]
    assert harness["sdk"] == name and harness["version"] == SDK_AGENTS[name].installed_version()
    assert r.verdict is not None and r.verdict.passed


class Failing(CountingScripted):
    """A model whose every call fails upstream (a 503): the rollout must be failed(model), never a 0."""

    async def chat(self, request: dict[str, Any], ctx: Any = None) -> dict[str, Any]:
        from palaestra.core.errors import ModelError

        self.served += 1
        raise ModelError("upstream is down", status=503)


@pytest.mark.parametrize("name", sorted(SDK_AGENTS))
async def test_sdk_harness_model_failure_is_failed_model(name: str, files_env: Any) -> None:
    require_sdk(name)
    backend = Failing("replay", replay=[STEP])
    r = await run_rollout(TASK, env=files_env, agent=SDK_AGENTS[name](max_steps=4), proxy=ModelProxy(backend),
                          model_name="scripted", deadline_s=120)
    assert r.outcome.status == "failed" and r.outcome.kind == "model", (r.outcome.kind, r.outcome.message)
    assert backend.served >= 1 and r.verdict is None


@pytest.mark.parametrize("name", sorted(SDK_AGENTS))
async def test_sdk_harness_that_never_stops_ends_at_max_steps(name: str, files_env: Any) -> None:
    require_sdk(name)
    backend = CountingScripted("replay", replay=[STEP] * 40)  # always one more tool call
    agent = SDK_AGENTS[name](max_steps=2)
    r = await run_rollout(TASK, env=files_env, agent=agent, proxy=ModelProxy(backend), model_name="scripted",
                          deadline_s=120)
    assert r.outcome.status == "scored", r.outcome.message
    traj = r.trajectory
    assert traj.stop_reason == "max_steps"
    assert backend.served == len(traj.model_calls) <= 2 * 2 + 4  # bounded, and every call recorded
    assert len(traj.tool_calls) >= 2


@pytest.mark.parametrize("name", sorted(SDK_AGENTS))
async def test_sdk_harness_environment_failure_in_a_tool_is_failed_environment(name: str) -> None:
    """An SDK would hand a tool's exception to the model as text; the rollout fails with the kind instead."""
    from pathlib import Path

    from palaestra.placement import mount_env

    require_sdk(name)
    mounted = await mount_env(f"{Path(__file__).parent / 'faulty_env.py'}:FaultyEnv", "inprocess")
    try:
        backend = CountingScripted("replay", replay=[
            {"content": "", "tool_calls": [{"name": "explode", "arguments": {}}]}, {"content": "done"}])
        r = await run_rollout(Task(id="boom", env="faulty", input="Reach the store."), env=mounted.client,
                              agent=SDK_AGENTS[name](max_steps=4), proxy=ModelProxy(backend), model_name="scripted",
                              deadline_s=120)
    finally:
        await mounted.stop()
    assert r.outcome.status == "failed" and r.outcome.kind == "environment", (r.outcome.kind, r.outcome.message)
    assert r.verdict is None
