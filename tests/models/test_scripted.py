"""ScriptedBackend: fixed policies that answer complete Chat Completions bodies."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from palaestra.core.errors import ConfigError, ModelError
from palaestra.core.records import Reference, Task, ToolCall
from palaestra.models.base import CallContext, ModelBackend
from palaestra.models.scripted import ScriptedBackend, reference_key

REF = Reference(
    tool_calls=[ToolCall(name="add_event", arguments={"title": "standup", "start": "09:00"}),
                ToolCall(name="list_events", arguments={})],
    final_answer="Done: 1 event",
)
PROMPT = [{"role": "system", "content": "be helpful"}, {"role": "user", "content": "add a standup at 9"}]


def message(resp: dict[str, Any]) -> dict[str, Any]:
    msg: dict[str, Any] = resp["choices"][0]["message"]
    return msg


async def play(
    backend: ScriptedBackend, ctx: CallContext, prompt: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Drive a conversation like an agent: append each tool call and a tool result until an answer."""
    messages = list(prompt)
    responses = []
    for _ in range(10):
        resp = await backend.chat({"model": "m", "messages": messages}, ctx)
        responses.append(resp)
        msg = message(resp)
        messages.append(msg)
        if not msg.get("tool_calls"):
            break
        for call in msg["tool_calls"]:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
    return responses


async def test_oracle_plays_back_reference() -> None:
    backend = ScriptedBackend("oracle")
    assert isinstance(backend, ModelBackend)
    responses = await play(backend, CallContext(reference=REF), PROMPT)
    assert len(responses) == 3
    first, second, last = (message(r) for r in responses)
    call = first["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "add_event"
    assert json.loads(call["function"]["arguments"]) == {"title": "standup", "start": "09:00"}
    assert second["tool_calls"][0]["function"]["name"] == "list_events"
    assert responses[0]["choices"][0]["finish_reason"] == "tool_calls"
    assert last["content"] == "Done: 1 event" and responses[2]["choices"][0]["finish_reason"] == "stop"
    again = await play(ScriptedBackend("oracle"), CallContext(reference=REF), PROMPT)
    assert [message(r).get("tool_calls") for r in again] == [message(r).get("tool_calls") for r in responses]
    body = responses[0]
    assert body["object"] == "chat.completion" and body["model"] == "m" and body["id"]
    chars = len("be helpful") + len("add a standup at 9")
    assert body["usage"]["prompt_tokens"] == chars // 4
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_oracle_finds_reference_by_prompt_hash() -> None:
    key = reference_key(PROMPT)
    backend = ScriptedBackend("oracle", references={key: REF.model_dump()})
    # A harness that prepends its own user message still finds the task's reference.
    prompt = [{"role": "user", "content": "<environment context>"}, *PROMPT[1:]]
    responses = await play(backend, CallContext(), prompt)
    assert message(responses[-1])["content"] == "Done: 1 event"
    by_task = ScriptedBackend("oracle", references={"t1": REF})
    req = {"messages": [{"role": "user", "content": "x"}]}
    out = await by_task.chat(req, CallContext(task=Task(id="t1")))
    assert message(out)["tool_calls"][0]["function"]["name"] == "add_event"
    missing = await backend.chat({"messages": [{"role": "user", "content": "other"}]}, CallContext())
    assert "no reference" in message(missing)["content"]


async def test_reference_key_normalises_text_parts() -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "add a standup at 9"}]}]
    assert reference_key(parts) == reference_key(PROMPT)
    assert reference_key(PROMPT) != reference_key([{"role": "user", "content": "other"}])


async def test_constant_echo_null() -> None:
    ctx = CallContext()
    req = {"messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "a"},
                        {"role": "user", "content": "second"}]}
    assert message(await ScriptedBackend("constant").chat(req, ctx))["content"] == "\\boxed{A}"
    assert message(await ScriptedBackend("constant", constant_text="42").chat(req, ctx))["content"] == "42"
    assert message(await ScriptedBackend("echo").chat(req, ctx))["content"] == "second"
    null = await ScriptedBackend("null").chat(req, ctx)
    assert message(null)["content"] == "" and null["choices"][0]["finish_reason"] == "stop"


async def test_replay_in_order_then_last() -> None:
    recorded: list[dict[str, Any]] = [
        {"content": None, "tool_calls": [{"id": "c1", "type": "function",
                                          "function": {"name": "search", "arguments": {"q": "x"}}}]},
        {"content": "final"},
    ]
    backend = ScriptedBackend("replay", replay=recorded)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    first = message(await backend.chat({"messages": messages}, CallContext()))
    assert first["tool_calls"][0]["id"] == "c1"
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"q": "x"}
    messages += [first, {"role": "tool", "tool_call_id": "c1", "content": "r"}]
    assert message(await backend.chat({"messages": messages}, CallContext()))["content"] == "final"
    messages += [{"role": "assistant", "content": "final"}, {"role": "user", "content": "more"}]
    assert message(await backend.chat({"messages": messages}, CallContext()))["content"] == "final"


async def pattern(seed: int, n: int = 40) -> list[bool]:
    backend = ScriptedBackend("constant", failure_rate=0.5, seed=seed)
    out = []
    for _ in range(n):
        try:
            await backend.chat({"messages": []}, CallContext())
            out.append(True)
        except ModelError as exc:
            assert exc.status == 500
            out.append(False)
    return out


async def test_failure_rate_is_deterministic_for_a_seed() -> None:
    a, b, c = await pattern(1), await pattern(1), await pattern(2)
    assert a == b and a != c
    assert 8 < a.count(False) < 32
    always = ScriptedBackend("null", failure_rate=1.0)
    with pytest.raises(ModelError):
        await always.chat({"messages": []}, CallContext())


async def test_latency() -> None:
    backend = ScriptedBackend("null", latency_ms=50)
    t0 = time.perf_counter()
    await backend.chat({"messages": []}, CallContext())
    assert time.perf_counter() - t0 >= 0.045


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown scripted policy"):
        ScriptedBackend("genius")
    with pytest.raises(ConfigError, match="replay policy needs"):
        ScriptedBackend("replay")
    with pytest.raises(ConfigError, match="failure_rate"):
        ScriptedBackend("null", failure_rate=2)
