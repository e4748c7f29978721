"""Token fidelity on the real local model: a 3-turn tool-use rollout exports as one sequence that decodes
to the conversation, whose mask covers exactly the sampled tokens and whose logprobs are the model's; an
injected re-render of an earlier turn is detected and falls back to per-turn samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.records import Rollout, Task
from palaestra.models.base import CallContext
from palaestra.placement import mount_env
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy
from palaestra.train.continuation import ContinuationBackend
from palaestra.train.rows import rl_rows
from palaestra.train.sequence import build_samples

pytestmark = pytest.mark.timeout(300)
ENVS = Path(__file__).parent / "envs.py"

PLAN: list[Any] = [{"type": "function", "function": {"name": "add"}},
                   {"type": "function", "function": {"name": "total"}}, "none"]


class ThreeTurns:
    """Forces the shape of the rollout (add, then total, then a plain answer) so it is always 3 turns."""

    name = "three-turns"

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        turn = sum(1 for m in request["messages"] if m.get("role") == "assistant")
        limit = 40 if turn < 2 else 12  # a whole tool call; a short answer
        out: dict[str, Any] = await self.inner.chat({**request, "tool_choice": PLAN[min(turn, 2)],
                                                     "max_tokens": limit}, ctx)
        return out

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def rollout(policy: tuple[Any, Any, Any]) -> Rollout:
    import asyncio

    backend, _, _ = policy

    async def run() -> Rollout:
        mounted = await mount_env(f"{ENVS}:Tally", "direct")
        task = Task(id="t0", env="tally", input="Add 2 to the total, then read it, then say the total.")
        try:
            return await run_rollout(task, env=mounted.client, agent=ToolAgent(max_steps=3),
                                     proxy=ModelProxy(ThreeTurns(ContinuationBackend(backend))), model_name="local",
                                     sampling={"temperature": 0.0})
        finally:
            await mounted.stop()

    return asyncio.run(run())


def test_three_turns_make_one_sequence_that_decodes_to_the_conversation(rollout: Rollout,
                                                                         policy: tuple[Any, Any, Any]) -> None:
    from palaestra.models.local import toolcalls
    from palaestra.train.local_policy import render_text

    _, _, tok = policy
    calls = rollout.trajectory.model_calls
    assert rollout.outcome.status == "scored" and len(calls) == 3
    assert all(c.token_capture == "ids+logprobs" for c in calls)
    assert [c.response["palaestra"]["continued"] for c in calls[1:]] == [True, True]  # type: ignore[index]
    result = build_samples(rollout)
    assert result.drifts == [] and result.checked == 2 and len(result.samples) == 1
    sample = result.samples[0]
    assert sample.turns == [0, 1, 2]

    messages = rollout.trajectory.messages
    tools = calls[0].request["tools"]
    # The first prompt is the chat template's rendering of the task's messages with the tools.
    first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
    assert tok.decode(sample.prompt_ids) == render_text(tok, messages[:first_user + 1], tools, True)
    # Walk the completion: generated span, environment span, generated span, ...
    spans, start = [], 0
    mask = sample.completion_mask
    while start < len(mask):
        end = start
        while end < len(mask) and mask[end] == mask[start]:
            end += 1
        spans.append((mask[start], tok.decode(sample.completion_ids[start:end])))
        start = end
    assert [m for m, _ in spans] == [1, 0, 1, 0, 1]
    assistant = [m for m in messages if m["role"] == "assistant"]
    tool_outputs = [m["content"] for m in messages if m["role"] == "tool"]
    for k, (_, text) in enumerate(spans[0::2]):
        said = text.removesuffix(tok.eos_token)
        if k < 2:  # a tool call: what was generated parses to exactly the call the environment ran
            _, parsed, failures = toolcalls.parse(said, tools, "x")
            assert failures == 0
            assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed] == \
                [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in assistant[k]["tool_calls"]]
        else:
            assert said == rollout.trajectory.final_answer
    for k, (_, text) in enumerate(spans[1::2]):
        assert tool_outputs[k] in text and "<|im_start|>tool" in text and text.endswith("<|im_start|>assistant\n")
    assert tool_outputs[0].startswith("total is ")


def test_mask_covers_exactly_the_sampled_tokens_and_logprobs_match_the_model(
        rollout: Rollout, policy: tuple[Any, Any, Any]) -> None:
    import torch

    _, model, _ = policy
    calls = rollout.trajectory.model_calls
    sample = build_samples(rollout).samples[0]
    ids, mask = sample.input_ids, sample.loss_mask
    generated = [t for c in calls for t in c.generation_token_ids or []]
    assert [t for t, m in zip(ids, mask) if m] == generated
    assert sum(mask) == len(generated)
    for c in calls:  # each turn's span sits right after its own prompt
        start, n = len(c.prompt_token_ids or []), len(c.generation_token_ids or [])
        assert mask[start:start + n] == [1] * n and ids[:start] == c.prompt_token_ids
        assert (start == 0 or mask[start - 1] == 0) and (start + n == len(mask) or mask[start + n] == 0)
    recorded = [0.0] * len(sample.prompt_ids) + list(sample.completion_logprobs or [])
    assert [lp for lp, m in zip(recorded, mask) if m] == [lp for c in calls for lp in c.generation_logprobs or []]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    lps = torch.log_softmax(logits[:-1], dim=-1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
    gaps = [abs(float(lps[i - 1]) - recorded[i]) for i in range(1, len(ids)) if mask[i]]
    assert max(gaps) < 2e-3, f"recorded logprobs differ from a forward pass by up to {max(gaps):.2e}"


def test_an_injected_re_render_is_detected_and_falls_back_to_per_turn_samples(
        rollout: Rollout, policy: tuple[Any, Any, Any]) -> None:
    _, _, tok = policy
    drifted = rollout.model_copy(deep=True)
    calls = drifted.trajectory.model_calls
    p1, g1 = calls[1].prompt_token_ids or [], calls[1].generation_token_ids or []
    p2 = calls[2].prompt_token_ids or []
    # Re-render turn 1's tool call inside turn 2's prompt the way a template that re-serialises JSON would.
    said = tok.decode(p2[len(p1):len(p1) + len(g1)])
    changed = said.replace(", ", ",", 1) if ", " in said else said.replace('": ', '":', 1)
    assert changed != said
    calls[2].prompt_token_ids = p2[:len(p1)] + tok(changed, add_special_tokens=False)["input_ids"] + \
        p2[len(p1) + len(g1):]

    result = build_samples(drifted)
    assert [d.turn for d in result.drifts] == [2]
    assert len(p1) <= result.drifts[0].position < len(p1) + len(g1)
    assert len(result.samples) == 3  # per-turn fallback: every sample is still exactly what the model saw
    for sample, call in zip(result.samples, calls):
        assert sample.prompt_ids == call.prompt_token_ids
        assert sample.completion_ids == call.generation_token_ids
        assert set(sample.completion_mask) == {1} and sample.completion_logprobs == call.generation_logprobs
    assert len(build_samples(drifted, "split").samples) == 2
    assert build_samples(drifted, "drop").samples == []
    rows, stats = rl_rows([rollout, drifted.model_copy(update={"rollout_id": "x", "repeat": 1})])
    assert stats.token_drift_rate == pytest.approx(0.25) and (stats.drifted_turns, stats.checked_turns) == (1, 4)
    assert [r["drifted"] for r in rows] == [False, True, True, True]
    assert rows[1]["drifted_turns"] == [2]


def test_the_compact_journal_form_keeps_every_token_of_the_real_model(rollout: Rollout) -> None:
    """Journaled compact (later turns store only the ids they add), the rollout expands to the very same
    tokens, and exports the same RL row."""
    import orjson

    from palaestra.rollout.compact import compact_rollout, expand_record
    from palaestra.rollout.journal import encode_record

    task = Task(id="t0", env="tally", input="Add 2 to the total, then read it, then say the total.")
    stored = orjson.loads(encode_record(compact_rollout(rollout, task)))
    calls = stored["trajectory"]["model_calls"]
    assert calls[1]["prompt_token_ids"][0]["$prefix"] == 0  # the second prompt extends the first turn
    assert len(calls[1]["prompt_token_ids"]) < len(rollout.trajectory.model_calls[1].prompt_token_ids or [])
    back = Rollout.model_validate(expand_record(stored, {"t0": task}))
    assert back.model_dump(mode="json") == rollout.model_dump(mode="json")
    assert rl_rows([back])[0] == rl_rows([rollout])[0]
