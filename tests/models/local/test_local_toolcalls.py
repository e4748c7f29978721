"""Hermes-style tool calls: parsing (no model needed) and schema-constrained decoding on the real model."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from palaestra.models.local import toolcalls

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 40},
                                                    "limit": {"type": "integer", "minimum": 1, "maximum": 5}},
                   "required": ["query"]}}}
TOOLS = [WEATHER, ADD, SEARCH]


def test_parse_turns_blocks_into_openai_tool_calls() -> None:
    text = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}'
            '\n</tool_call>\n<tool_call>{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}</tool_call>')
    content, calls, failures = toolcalls.parse(text, TOOLS, "seed")
    assert failures == 0 and content == "Let me check."
    assert [c["function"]["name"] for c in calls] == ["get_weather", "add"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo", "unit": "celsius"}
    assert json.loads(calls[1]["function"]["arguments"]) == {"a": 1, "b": 2}
    assert calls[0]["id"] != calls[1]["id"] and calls[0]["id"].startswith("call_")
    again = toolcalls.parse(text, TOOLS, "seed")[1]
    assert [c["id"] for c in again] == [c["id"] for c in calls]  # deterministic
    assert toolcalls.parse(text, TOOLS, "other prompt")[1][0]["id"] != calls[0]["id"]


def test_parse_counts_failures_and_keeps_their_text() -> None:
    text = ('<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call> then '
            '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>')
    content, calls, failures = toolcalls.parse(text, TOOLS, "s")
    assert calls == [] and failures == 2 and content == text
    # an unterminated last block (the model ran out of tokens) is still tried
    content, calls, failures = toolcalls.parse('<tool_call>\n[{"name": "add", "arguments": {"a": 1, "b": 1}}]',
                                               TOOLS, "s")
    assert failures == 0 and content is None and calls[0]["function"]["name"] == "add"
    assert toolcalls.parse("plain answer", TOOLS, "s") == ("plain answer", [], 0)


def test_call_schema_closes_objects_and_can_name_one_tool() -> None:
    schema = toolcalls.call_schema(TOOLS)
    assert [o["properties"]["name"]["const"] for o in schema["anyOf"]] == ["get_weather", "add", "search"]
    assert schema["anyOf"][0]["properties"]["arguments"]["additionalProperties"] is False
    only = toolcalls.call_schema(TOOLS, "add")
    assert [o["properties"]["name"]["const"] for o in only["anyOf"]] == ["add"]
    with pytest.raises(ValueError):
        toolcalls.call_schema(TOOLS, "nope")


def _valid(name: str, args: dict[str, Any]) -> bool:
    if name == "get_weather":
        return set(args) == {"city", "unit"} and isinstance(args["city"], str) and \
            args["unit"] in ("celsius", "fahrenheit")
    if name == "add":
        return set(args) == {"a", "b"} and all(isinstance(v, int) for v in args.values())
    if name == "search":
        return "query" in args and set(args) <= {"query", "limit"} and len(args["query"]) <= 40 and \
            (1 <= args.get("limit", 1) <= 5)
    return False


@pytest.mark.timeout(300)
async def test_required_tool_choice_always_yields_a_valid_call(local_backend: Any) -> None:
    prompts = ["What's the weather like in Lisbon?", "Please add 17 and 25.", "Find recent news about owls.",
               "Tell me a joke.", "asdf qwerty"]
    requests = [{"messages": [{"role": "user", "content": p}], "tools": TOOLS, "tool_choice": "required",
                 "max_tokens": 64, "temperature": 0.8, "seed": i} for i, p in enumerate(prompts)]
    requests.append({"messages": [{"role": "user", "content": "Hello there!"}], "tools": TOOLS, "max_tokens": 64,
                     "tool_choice": {"type": "function", "function": {"name": "add"}}, "temperature": 0})
    responses = await asyncio.gather(*[local_backend.chat(r) for r in requests])
    for response in responses:
        choice = response["choices"][0]
        assert choice["palaestra"] == {"tool_parse_failures": 0, "constrained": True}, choice
        assert choice["finish_reason"] == "tool_calls", choice
        (call,) = choice["message"]["tool_calls"]
        name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
        assert _valid(name, args), (name, args)
    assert responses[-1]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "add"


@pytest.mark.timeout(300)
async def test_tool_choice_none_renders_no_tools(local_backend: Any) -> None:
    response = await local_backend.chat({"messages": [{"role": "user", "content": "Hi"}], "tools": TOOLS,
                                         "tool_choice": "none", "max_tokens": 1, "temperature": 0})
    prompt_text = local_backend.engine.loaded.result().tokenizer.decode(response["prompt_token_ids"])
    assert "get_weather" not in prompt_text and "tool_calls" not in response["choices"][0]["message"]
