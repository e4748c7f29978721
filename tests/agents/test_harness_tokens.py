"""Token fidelity through external harnesses on the real local model (SmolLM2-135M): a two-turn rollout
(a forced tool call, then an answer) driven by a harness's own loop (openai-agents', strands-agents', and
LangGraph's prebuilt ReAct graph) keeps, in the trajectory, exactly
the token ids the backend produced, and the turn-to-turn prefix check (drift) is reported.

The harness's requests travel: SDK client → loopback endpoint (its own proxy, streaming or not) → the
rollout's model proxy → the backend. ``Recorder`` sits at the bottom and keeps what the backend itself
returned, before any of that; the test compares each recorded model call with it, id for id. The turn plan
(a ``tool_choice`` per turn and a short ``max_tokens``) only shapes the rollout so that it is always two
turns on a 135M model; it changes nothing about how tokens are captured."""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from palaestra.agents.registry import make_agent
from palaestra.agents.sdk import SDK_AGENTS
from palaestra.core.records import Task
from palaestra.models.base import CallContext
from palaestra.placement import mount_env
from palaestra.report.tokens import token_view
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy
from palaestra.train.continuation import ContinuationBackend
from palaestra.train.sequence import build_samples

pytestmark = pytest.mark.timeout(1500)  # a bound against a hang: on an idle 2-core machine each case takes seconds
TALLY = f"{Path(__file__).parents[1] / 'train' / 'envs.py'}:Tally"
TASK = Task(id="tally-2", env="tally", input="Add 2 to the total with the add tool, then say the total.")


class Recorder:
    """The backend's own answers, per rollout: (prompt ids, generated ids, logprobs) as it returned them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = "recorder"
        self.seen: dict[str, list[tuple[list[int], list[int], list[float]]]] = {}

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        out: dict[str, Any] = await self.inner.chat(request, ctx)
        choice = out["choices"][0]
        own = (copy.deepcopy(out["prompt_token_ids"]), copy.deepcopy(choice["token_ids"]),
               [c["logprob"] for c in choice["logprobs"]["content"]])
        self.seen.setdefault(str(ctx.rollout_id), []).append(own)
        return out

    async def aclose(self) -> None:
        return None


class TwoTurns:
    """Turn 1: the ``add`` tool, forced; turn 2: the answer (or ``final_tool``, forced, for a harness that
    answers through a tool of its own, as smolagents does). Turns are counted by assistant messages."""

    name = "two-turns"

    def __init__(self, inner: Any, final_tool: str | None) -> None:
        self.inner = inner
        self.final_tool = final_tool

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        turn = sum(1 for m in request.get("messages") or [] if m.get("role") == "assistant")
        if turn == 0:
            plan: Any = {"type": "function", "function": {"name": "add"}}
        else:
            plan = {"type": "function", "function": {"name": self.final_tool}} if self.final_tool else "none"
        out: dict[str, Any] = await self.inner.chat({**request, "tool_choice": plan,
                                                     "max_tokens": 40 if turn == 0 else 16}, ctx)
        return out

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def local(local_model_path: Path) -> Iterator[Any]:
    from palaestra.models.local import make_local_backend

    backend = make_local_backend("local", max_batch=4, notify=lambda _: None)
    backend.start()
    backend.engine.loaded.result(timeout=600)
    yield backend
    backend.engine.close()


def harness(name: str) -> Any:
    """The harness, or a skip naming the capability it lacks (decided before anything runs)."""
    if name == "langgraph":
        if importlib.util.find_spec("langgraph") is None:
            pytest.skip("langgraph: the [langgraph] extra is not installed")
        return make_agent("langgraph", max_steps=4)
    cls = SDK_AGENTS[name]
    if not cls.available():
        pytest.skip(f"sdk: {cls.distribution} is not installed (pip install 'palaestra[sdk]')")
    return cls(max_steps=4)


# smolagents is left out here: its default system prompt (a few thousand tokens of worked examples) makes each
# turn minutes long on a loaded 2-core CPU; tests/agents/test_sdk_harnesses.py runs it against the scripted model.
@pytest.mark.parametrize("name", ["openai-agents", "strands-agents", "langgraph"])
async def test_harness_keeps_the_backends_exact_token_ids_and_reports_drift(name: str, local: Any) -> None:
    agent = harness(name)
    recorder = Recorder(local)
    proxy = ModelProxy(TwoTurns(ContinuationBackend(recorder), None))
    mounted = await mount_env(TALLY, "inprocess")
    try:
        r = await run_rollout(TASK, env=mounted.client, agent=agent, proxy=proxy, model_name="local",
                              sampling={"temperature": 0.0}, deadline_s=500)
    finally:
        await mounted.stop()
    assert r.outcome.status == "scored", f"{r.outcome.kind}: {r.outcome.message}"
    calls = r.trajectory.model_calls
    [own] = recorder.seen.values()
    assert len(calls) == len(own) == 2  # two turns, every one the backend answered is in the trajectory
    assert [t.name for t in r.trajectory.tool_calls] == ["add"]  # the SDK ran the forced tool call
    for call, (prompt_ids, gen_ids, logprobs) in zip(calls, own):
        assert call.token_capture == "ids+logprobs"
        assert call.prompt_token_ids == prompt_ids and call.generation_token_ids == gen_ids  # id for id
        assert call.generation_logprobs == pytest.approx(logprobs)
    tool_text = r.trajectory.tool_calls[0].output
    decoded = local.engine.loaded.result().tokenizer.decode(calls[1].prompt_token_ids)
    assert str(tool_text) in decoded  # the tool's output reached the model, in the ids it was given
    result = build_samples(r)
    view = token_view([c.model_dump() for c in calls])
    assert view is not None and view["checked_turns"] == result.checked == 1  # drift checked, and reported
    assert view["drifted_turns"] == len(result.drifts)
    print(f"{name}: drifted turns {len(result.drifts)}/{result.checked}, "
          f"continued {proxy.backend.inner.continued}, samples {len(result.samples)}")
