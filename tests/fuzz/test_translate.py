"""Hostile dialects: the proxy's pure translators (wire/responses.py, wire/anthropic.py) and its HTTP face on arbitrary
Responses / Anthropic Messages requests and arbitrary chat-completion responses.

Promise under test: a translator returns a JSON-encodable body without mutating its input, or raises
``TranslationError`` (the proxy's 400); a response translator may also raise ``ModelError`` (a bad
backend answer, 502). Nothing else escapes, so the proxy never answers a 500 for a malformed body.
"""

from __future__ import annotations

import copy
from typing import Any

import httpx
import orjson
import pytest
from fuzz_strategies import (
    INTEGERS,
    JSON,
    STRINGS,
    TEXT,
    chat_completions,
    ci,
    long,
    shaped_dict,
    weighted,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from palaestra.core.errors import ModelError
from palaestra.models.base import CallContext
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import ModelProxy
from palaestra.wire import anthropic, responses
from palaestra.wire.translate import TranslationError

_TRANSLATORS = {fn.__name__: fn for fn in (responses.responses_to_chat, anthropic.messages_to_chat,
                                           responses.chat_to_responses, anthropic.chat_to_messages)}

ROLES = st.sampled_from(["user", "assistant", "system", "developer", "tool"]) | STRINGS
NAMES = st.sampled_from(["get_weather", "apply_patch", ""]) | STRINGS

# ---- OpenAI Responses requests ----------------------------------------------------------------------
R_PART = shaped_dict({"type": st.sampled_from(["input_text", "output_text", "text", "refusal", "input_image"]),
                      "text": STRINGS, "refusal": STRINGS, "image_url": STRINGS, "file_id": STRINGS,
                      "detail": st.sampled_from(["auto", "low", "high"])})
R_ITEM = weighted(
    (3, shaped_dict({"type": st.just("message"), "role": ROLES, "content": STRINGS | st.lists(R_PART, max_size=3)})),
    (2, shaped_dict({"type": st.sampled_from(["function_call", "custom_tool_call"]), "name": NAMES,
                     "arguments": STRINGS | JSON, "input": STRINGS, "call_id": STRINGS, "id": STRINGS})),
    (2, shaped_dict({"type": st.sampled_from(["function_call_output", "custom_tool_call_output"]),
                     "call_id": STRINGS, "output": STRINGS | st.lists(R_PART, max_size=2)})),
    (1, shaped_dict({"type": st.sampled_from(["reasoning", "item_reference", "web_search_call"]),
                     "summary": JSON})),
    (1, JSON),
)
R_TOOL = shaped_dict({"type": st.sampled_from(["function", "custom", "web_search"]), "name": NAMES,
                      "description": STRINGS, "parameters": JSON, "strict": st.booleans()})
RESPONSES_REQUEST = shaped_dict({
    "model": STRINGS, "instructions": STRINGS | st.lists(R_PART, max_size=2),
    "input": STRINGS | st.lists(R_ITEM, max_size=5), "tools": st.lists(R_TOOL, max_size=3),
    "tool_choice": st.sampled_from(["auto", "none", "required"]) | shaped_dict({"type": TEXT, "name": NAMES}),
    "text": shaped_dict({"format": shaped_dict({"type": st.sampled_from(["text", "json_schema", "json_object"]),
                                                "name": STRINGS, "schema": JSON, "strict": st.booleans()})}),
    "reasoning": shaped_dict({"effort": st.sampled_from(["low", "medium", "high"])}),
    "max_output_tokens": INTEGERS, "temperature": JSON, "top_p": JSON, "parallel_tool_calls": st.booleans(),
    "stream": st.booleans(), "metadata": JSON,
})

# ---- Anthropic Messages requests --------------------------------------------------------------------
A_BLOCK = weighted(
    (3, shaped_dict({"type": st.just("text"), "text": STRINGS})),
    (1, shaped_dict({"type": st.just("image"), "source": shaped_dict({"type": st.sampled_from(["base64", "url"]),
                                                                      "media_type": STRINGS, "data": STRINGS,
                                                                      "url": STRINGS})})),
    (2, shaped_dict({"type": st.just("tool_use"), "id": STRINGS, "name": NAMES, "input": JSON})),
    (2, shaped_dict({"type": st.just("tool_result"), "tool_use_id": STRINGS, "is_error": st.booleans(),
                     "content": STRINGS | st.lists(shaped_dict({"type": st.just("text"), "text": STRINGS}),
                                                   max_size=2)})),
    (1, shaped_dict({"type": st.sampled_from(["thinking", "redacted_thinking"]), "thinking": STRINGS})),
    (1, JSON),
)
A_TURN = weighted((5, shaped_dict({"role": st.sampled_from(["user", "assistant"]),
                                   "content": STRINGS | st.lists(A_BLOCK, max_size=4)})), (1, JSON))
MESSAGES_REQUEST = shaped_dict({
    "model": STRINGS, "max_tokens": INTEGERS, "system": STRINGS | st.lists(A_BLOCK, max_size=2),
    "messages": st.lists(A_TURN, max_size=5), "stop_sequences": st.lists(STRINGS, max_size=3),
    "tools": st.lists(shaped_dict({"name": NAMES, "description": STRINGS, "input_schema": JSON}), max_size=3),
    "tool_choice": shaped_dict({"type": st.sampled_from(["auto", "any", "tool", "none"]), "name": NAMES,
                                "disable_parallel_tool_use": st.booleans()}),
    "temperature": JSON, "top_k": JSON, "stream": st.booleans(),
})

CHAT_RESPONSE = chat_completions(NAMES, STRINGS | JSON, st.lists(shaped_dict({"type": st.just("text"),
                                                                             "text": STRINGS}), max_size=2))


def _check_request(fn: Any, body: Any) -> None:
    before = copy.deepcopy(body)
    try:
        out = fn(body)
    except TranslationError as exc:
        assert str(exc).strip()
        return
    finally:
        assert body == before, f"{fn.__name__} mutated its input"
    assert isinstance(out, dict) and isinstance(out.get("messages"), list)
    assert all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in out["messages"])
    orjson.dumps(out)  # the proxy sends it to the backend as JSON


def _check_response(fn: Any, chat: Any, request: Any) -> None:
    before = copy.deepcopy((chat, request))
    try:
        out = fn(chat, request)
    except (TranslationError, ModelError) as exc:
        assert str(exc).strip()
        return
    finally:
        assert (chat, request) == before, f"{fn.__name__} mutated its input"
    assert isinstance(out, dict)
    orjson.dumps(out)


def _requests_property(cfg: settings) -> None:
    @cfg
    @given(RESPONSES_REQUEST | JSON, MESSAGES_REQUEST | JSON)
    def prop(responses_body: Any, messages_body: Any) -> None:
        _check_request(responses.responses_to_chat, responses_body)
        _check_request(anthropic.messages_to_chat, messages_body)

    prop()


def _responses_property(cfg: settings) -> None:
    @cfg
    @given(CHAT_RESPONSE, RESPONSES_REQUEST, MESSAGES_REQUEST)
    def prop(chat: Any, responses_request: Any, messages_request: Any) -> None:
        _check_response(responses.chat_to_responses, chat, responses_request)
        _check_response(anthropic.chat_to_messages, chat, messages_request)

    prop()



def test_request_translators_raise_only_translation_error() -> None:
    _requests_property(ci(150))


def test_response_translators_raise_only_translation_error() -> None:
    _responses_property(ci(150))


@pytest.mark.fuzz
@pytest.mark.timeout(3600)
def test_request_translators_long() -> None:
    _requests_property(long(20000))


@pytest.mark.fuzz
@pytest.mark.timeout(3600)
def test_response_translators_long() -> None:
    _responses_property(long(20000))


def test_well_formed_bodies_translate() -> None:
    """Guards the property's oracle: good requests translate, so the properties above are not vacuous."""
    chat = responses.responses_to_chat({"input": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "function", "name": "f", "parameters": {"type": "object"}}]})
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and chat["tools"][0]["function"]["name"] == "f"
    chat = anthropic.messages_to_chat({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                                "tool_choice": {"type": "any"}})
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and chat["tool_choice"] == "required"
    resp = {"choices": [{"message": {"content": "ok", "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": '{"a": 1}'}}]}}], "usage": {"prompt_tokens": 2}}
    assert anthropic.chat_to_messages(resp)["content"][1]["input"] == {"a": 1}
    assert [o["type"] for o in responses.chat_to_responses(resp)["output"]] == ["message", "function_call"]


# ---- inputs that once broke a translator (found by this suite): each is now a TranslationError -------
BUG_CASES: list[tuple[str, tuple[Any, ...]]] = [
    ("responses_to_chat", ({"tools": [True]},)),
    ("responses_to_chat", ({"tools": 5},)),
    ("responses_to_chat", ({"text": "x"},)),
    ("responses_to_chat", ({"text": {"format": "json"}},)),
    ("responses_to_chat", ({"reasoning": "high"},)),
    ("responses_to_chat", ({"input": [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": 5}]}]},)),
    ("messages_to_chat", ({"messages": [], "tool_choice": "auto"},)),
    ("messages_to_chat", ({"messages": [], "tool_choice": {"type": []}},)),
    ("messages_to_chat", ({"messages": [], "tools": 5},)),
    ("messages_to_chat", ({"messages": [{"role": "user", "content": [{"type": "image", "source": "x"}]}]},)),
    ("messages_to_chat", ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},)),
    ("chat_to_responses", ({"choices": [None]}, {})),
    ("chat_to_responses", ({"choices": {"a": 1}}, {})),
    ("chat_to_responses", ({"choices": 5}, {})),
    ("chat_to_responses", ({"choices": [{"message": "hi"}]}, {})),
    ("chat_to_responses", ({"choices": [{"message": {"tool_calls": 5}}]}, {})),
    ("chat_to_responses", ({"choices": [{"message": {"tool_calls": [5]}}]}, {})),
    ("chat_to_responses", ({"choices": [{"message": {"tool_calls": [{"function": "f"}]}}]}, {})),
    ("chat_to_responses", ({"usage": "x"}, {})),
    ("chat_to_responses", ({"usage": {"prompt_tokens": "x"}}, {})),
    ("chat_to_responses", ({}, {"tools": [5]})),
    ("chat_to_messages", ({"choices": [None]}, {})),
    ("chat_to_messages", ({"choices": [{"message": "hi"}]}, {})),
    ("chat_to_messages", ({"choices": [{"message": {"tool_calls": [5]}}]}, {})),
    ("chat_to_messages", ({"usage": {"completion_tokens": "x"}}, {})),
    ("chat_to_messages", ({"choices": [{"message": {"content": "a"}, "stop_reason": "x"}]}, {"stop_sequences": 5})),
]


@pytest.mark.parametrize(("fn", "args"), BUG_CASES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BUG_CASES)])
def test_translator_bug(fn: str, args: tuple[Any, ...]) -> None:
    if fn.startswith("chat_to_"):
        _check_response(_TRANSLATORS[fn], *args)
    else:
        _check_request(_TRANSLATORS[fn], *args)


# ---- the proxy's HTTP face -------------------------------------------------------------------------
class Echo:
    """A healthy backend: one plain answer."""

    name = "echo"

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        return {"id": "x", "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                        "finish_reason": "stop"}], "usage": {"prompt_tokens": 1}}

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(("path", "body"), [("/v1/responses", {"tools": [True]}),
                                            ("/v1/messages", {"messages": [], "tool_choice": "auto"})])
async def test_proxy_answers_4xx_for_malformed_dialect(path: str, body: dict[str, Any]) -> None:
    app = create_model_app(ModelProxy(Echo()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        resp = await client.post(path, json=body)
    assert 400 <= resp.status_code < 500, resp.text
    assert resp.json()["error"]["kind"] == "bad_request"


async def test_proxy_answers_json_errors_for_junk_bodies() -> None:
    app = create_model_app(ModelProxy(Echo()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
        for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/rollouts/r1/v1/messages"):
            for content in (b"", b"\xff\xfe", b"[1]", b"null", b'{"a":', b"1e400", b"[" * 2000):
                resp = await client.post(path, content=content)
                assert resp.status_code == 400, (path, content, resp.text)
                assert resp.json()["error"]["kind"] == "bad_request"


# Found by this suite: translate._usage int()-ed token counts unbounded, so a backend reporting 1e30 tokens (or
# two counts of 2**64-1, which chat_to_responses adds into total_tokens) gave a body orjson cannot encode and
# the proxy answered a plain-text 500. An implausible count now reads as unknown (0), see translate.token_count.
@pytest.mark.parametrize("usage", [{"prompt_tokens": 1e30},
                                   {"prompt_tokens": 2**64 - 1, "completion_tokens": 2**64 - 1}], ids=["float", "sum"])
@pytest.mark.parametrize("fn", ["chat_to_responses", "chat_to_messages"])
def test_huge_token_counts_stay_encodable(fn: str, usage: dict[str, Any]) -> None:
    if fn == "chat_to_messages" and "completion_tokens" in usage:
        usage = {"completion_tokens": 1e30}  # chat_to_messages does not add the counts up
    _check_response(_TRANSLATORS[fn], {"choices": [{"message": {"content": "x"}}], "usage": usage}, {})


@pytest.mark.parametrize(("value", "count"), [
    (12, 12), (0, 0), (12.0, 12), (2**53 - 1, 2**53 - 1), (2**53, 0), (2**64 - 1, 0), (1e30, 0), (-1, 0),
    (-0.0, 0), (1.5, 0), (float("nan"), 0), (float("inf"), 0), (True, 0), ("12", 0), (None, 0), ([1], 0),
    ({"n": 1}, 0)])
def test_token_counts_are_kept_only_when_plausible(value: Any, count: int) -> None:
    resp = {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": value, "completion_tokens": 3}}
    usage = responses.chat_to_responses(resp)["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (count, 3, count + 3)
    assert type(usage["input_tokens"]) is int
    assert anthropic.chat_to_messages(resp)["usage"] == {"input_tokens": count, "output_tokens": 3}


@pytest.mark.parametrize("usage", ["x", 5, [1, 2], None])
def test_usage_that_is_not_an_object_is_no_usage(usage: Any) -> None:
    resp = {"choices": [{"message": {"content": "x"}}], "usage": usage}
    assert anthropic.chat_to_messages(resp)["usage"] == {"input_tokens": 0, "output_tokens": 0}


class HugeUsage(Echo):
    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        return {**await super().chat(request, ctx), "usage": {"prompt_tokens": 1e30}}


@pytest.mark.parametrize(("path", "body"), [("/v1/responses", {"input": "hi"}),
                                            ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}],
                                                             "max_tokens": 16})])
async def test_proxy_survives_huge_token_counts(path: str, body: dict[str, Any]) -> None:
    app = create_model_app(ModelProxy(HugeUsage()))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
        resp = await client.post(path, json=body)
    assert resp.status_code < 500 or resp.headers["content-type"].startswith("application/json"), resp.text
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["input_tokens"] == 0


class BigInt(Echo):
    """A backend whose (stdlib-parsed) answer holds integers no 64-bit JSON encoder can write."""

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        return {**await super().chat(request, ctx), "usage": {"prompt_tokens": 2**70}, "created": 2**70}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
async def test_proxy_answers_valid_json_for_an_unencodable_backend_answer(path: str, stream: bool) -> None:
    """The translated dialects drop the implausible numbers and answer; the chat dialect passes the backend's
    answer through as it is, so it cannot be sent: a JSON model error (502), never a plain-text 500."""
    proxy = ModelProxy(BigInt())
    proxy.register("r1")
    app = create_model_app(proxy)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    body = {"messages": [{"role": "user", "content": "hi"}], "input": "hi", "stream": stream,
            "stream_options": {"include_usage": True}, "max_tokens": 16}
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
        resp = await client.post("/rollouts/r1" + path, json=body)
    assert proxy.pop_calls("r1")[0].usage == {}  # the recorded call keeps only plausible counts
    if path == "/v1/chat/completions":
        assert resp.status_code == 502 and resp.headers["content-type"].startswith("application/json"), resp.text
        error = resp.json()["error"]
        assert error["kind"] == "model" and "JSON" in error["message"], error
        return
    assert resp.status_code == 200, resp.text
    if not stream:
        assert resp.json()["usage"]["input_tokens"] == 0
