"""The model proxy: in-process over httpx.ASGITransport, and served by uvicorn for the official SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import openai
import orjson
import pytest

from palaestra.core.errors import ModelError
from palaestra.core.records import Reference, ToolCall
from palaestra.models.base import CallContext
from palaestra.models.openai_http import OpenAIBackend
from palaestra.models.scripted import ScriptedBackend
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import ModelProxy
from palaestra.wire import anthropic, responses, translate

REF = Reference(tool_calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})],
                final_answer="Sunny, 21C")
WEATHER: dict[str, Any] = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
HI: list[Any] = [{"role": "user", "content": "hi"}]
CHAT_TOOLS: list[Any] = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


def make(backend: Any = None) -> tuple[ModelProxy, httpx.AsyncClient]:
    proxy = ModelProxy(backend or ScriptedBackend("oracle"))
    proxy.register("r1", CallContext(reference=REF))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_model_app(proxy)), base_url="http://proxy")
    return proxy, client


@pytest.fixture
async def asgi() -> AsyncIterator[tuple[ModelProxy, httpx.AsyncClient]]:
    proxy, client = make()
    async with client:
        yield proxy, client


def sse(text: str) -> list[tuple[str | None, Any]]:
    """Parse an SSE body into (event name, decoded data) pairs."""
    events = []
    for block in text.strip().split("\n\n"):
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        events.append((name, data if data == "[DONE]" else json.loads(data or "null")))
    return events


async def test_chat_records_per_rollout(asgi: tuple[ModelProxy, httpx.AsyncClient]) -> None:
    proxy, client = asgi
    messages: list[dict[str, Any]] = [{"role": "user", "content": "weather in Paris?"}]
    r = await client.post("/rollouts/r1/v1/chat/completions", json={"model": "x", "messages": messages,
                                                                     "tools": CHAT_TOOLS})
    assert r.status_code == 200
    msg = r.json()["choices"][0]["message"]
    assert msg["tool_calls"][0]["function"]["name"] == "get_weather"
    messages += [msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "sunny"}]
    r = await client.post("/rollouts/r1/v1/chat/completions", json={"model": "x", "messages": messages})
    assert r.json()["choices"][0]["message"]["content"] == "Sunny, 21C"
    calls = proxy.pop_calls("r1")
    assert len(calls) == 2 and all(c.status == 200 and c.api == "chat" for c in calls)
    assert calls[1].request["messages"] == messages and calls[1].response is not None
    assert calls[0].usage["prompt_tokens"] >= 1 and calls[0].latency_s > 0 and calls[0].started > 0
    assert proxy.pop_calls("r1") == []
    # Un-prefixed calls are answered but belong to no rollout.
    r = await client.post("/v1/chat/completions", json={"messages": messages})
    assert r.status_code == 200 and proxy.pop_calls("r1") == []


async def test_responses_api_with_function_call_items(asgi: tuple[ModelProxy, httpx.AsyncClient]) -> None:
    proxy, client = asgi
    tools = [{"type": "function", "name": "get_weather", "parameters": WEATHER}]
    body: dict[str, Any] = {"model": "x", "instructions": "be brief", "input": "weather?", "tools": tools,
                            "max_output_tokens": 100}
    out = (await client.post("/rollouts/r1/v1/responses", json=body)).json()
    assert out["object"] == "response" and out["status"] == "completed"
    call = out["output"][0]
    assert call["type"] == "function_call" and json.loads(call["arguments"]) == {"city": "Paris"}
    body["input"] = [{"role": "user", "content": [{"type": "input_text", "text": "weather?"}]}, call,
                     {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]
    out = (await client.post("/rollouts/r1/v1/responses", json=body)).json()
    assert out["output"][0]["type"] == "message"
    assert out["output"][0]["content"][0] == {"type": "output_text", "text": "Sunny, 21C", "annotations": []}
    assert set(out["usage"]) >= {"input_tokens", "output_tokens"}
    sent = proxy.pop_calls("r1")[1].request
    assert sent["messages"][0] == {"role": "system", "content": "be brief"}
    assert sent["messages"][2]["tool_calls"][0]["id"] == call["call_id"]
    assert sent["messages"][3] == {"role": "tool", "tool_call_id": call["call_id"], "content": "sunny"}
    assert sent["max_tokens"] == 100 and sent["tools"][0]["function"]["name"] == "get_weather"


async def test_anthropic_messages_round_trip(asgi: tuple[ModelProxy, httpx.AsyncClient]) -> None:
    proxy, client = asgi
    tools = [{"name": "get_weather", "description": "weather", "input_schema": WEATHER}]
    body: dict[str, Any] = {"model": "claude-x", "max_tokens": 256, "system": "be brief", "tools": tools,
                            "messages": [{"role": "user", "content": "weather?"}]}
    out = (await client.post("/rollouts/r1/v1/messages", json=body)).json()
    assert out["type"] == "message" and out["stop_reason"] == "tool_use"
    use = out["content"][0]
    assert use["type"] == "tool_use" and use["input"] == {"city": "Paris"}
    body["messages"] += [
        {"role": "assistant", "content": out["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "sunny"}]},
    ]
    out = (await client.post("/rollouts/r1/v1/messages", json=body)).json()
    assert out["stop_reason"] == "end_turn" and out["content"] == [{"type": "text", "text": "Sunny, 21C"}]
    assert set(out["usage"]) == {"input_tokens", "output_tokens"}
    sent = proxy.pop_calls("r1")[1].request
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["max_tokens"] == 256 and sent["tools"][0]["function"]["parameters"] == WEATHER
    # Streaming: Anthropic's event sequence carrying the same tool_use.
    body["messages"] = body["messages"][:1]
    r = await client.post("/rollouts/r1/v1/messages", json={**body, "stream": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse(r.text)
    assert [e for e, _ in events] == ["message_start", "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"]
    assert events[1][1]["content_block"]["type"] == "tool_use"
    assert json.loads(events[2][1]["delta"]["partial_json"]) == {"city": "Paris"}
    assert events[4][1]["delta"]["stop_reason"] == "tool_use"


async def test_bad_requests_answer_400_json(asgi: tuple[ModelProxy, httpx.AsyncClient]) -> None:
    _, client = asgi
    r = await client.post("/v1/chat/completions", content=b"{not json",
                          headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["kind"] == "bad_request"
    assert "not valid JSON" in r.json()["error"]["message"]
    r = await client.post("/v1/chat/completions", json=[1, 2])
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
    r = await client.post("/v1/messages", json={"model": "m"})
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
    assert r.json()["type"] == "error"
    r = await client.post("/v1/nope", json={})
    assert r.status_code == 404 and r.json()["error"]["kind"] == "not_found"


async def test_backend_errors_are_recorded_and_answered() -> None:
    proxy, client = make(ScriptedBackend("null", failure_rate=1.0))
    async with client:
        r = await client.post("/rollouts/r1/v1/chat/completions",
                              json={"messages": HI})
    assert r.status_code == 502 and r.json()["error"]["kind"] == "model"
    assert "Traceback" not in r.text
    [call] = proxy.pop_calls("r1")
    assert call.status == 500 and call.error is not None and call.response is None


async def test_upstream_4xx_passes_through(live_server: Any) -> None:
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def reject(request: Any) -> Response:
        return Response(b'{"error": {"message": "context length exceeded"}}', status_code=400)

    url = live_server(Starlette(routes=[Route("/v1/chat/completions", reject, methods=["POST"])]))
    backend = OpenAIBackend(f"{url}/v1")
    proxy, client = make(backend)
    async with client:
        r = await client.post("/rollouts/r1/v1/chat/completions", json={"messages": HI})
    await backend.aclose()
    assert r.status_code == 400 and "context length exceeded" in r.json()["error"]["message"]
    assert proxy.pop_calls("r1")[0].status == 400


class TokenBackend:
    """A backend that answers like vLLM with return_token_ids and logprobs."""

    name = "tokens"

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        logprobs = {"content": [{"token": "h", "logprob": -0.5}, {"token": "i", "logprob": -1}]}
        msg = {"role": "assistant", "content": "hi"}
        return {"id": "c", "object": "chat.completion", "created": 0, "model": "v",
                "prompt_token_ids": [1, 2, 3],
                "choices": [{"index": 0, "message": msg, "finish_reason": "stop", "token_ids": [7, 8],
                             "logprobs": logprobs}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                          "prompt_tokens_details": None}}

    async def aclose(self) -> None:
        return None


async def test_token_ids_and_logprobs_are_recorded() -> None:
    proxy, client = make(TokenBackend())
    async with client:
        r = await client.post("/rollouts/r9/v1/chat/completions", json={"messages": HI})
        assert r.status_code == 200
        models = (await client.get("/v1/models")).json()
        health = (await client.get("/healthz")).json()
    [call] = proxy.pop_calls("r9")  # unregistered rollouts are recorded too
    assert call.prompt_token_ids == [1, 2, 3] and call.generation_token_ids == [7, 8]
    assert call.generation_logprobs == [-0.5, -1.0]
    assert call.usage == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert models["data"][0]["id"] == "tokens" and health["status"] == "ok"


async def test_official_openai_sdk(live_server: Any) -> None:
    proxy = ModelProxy(ScriptedBackend("oracle"))
    proxy.register("r2", CallContext(reference=REF))
    url = live_server(create_model_app(proxy))
    client = openai.AsyncOpenAI(base_url=f"{url}/rollouts/r2/v1", api_key="unused", max_retries=0)
    async with client:
        chat = await client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "weather?"}], tools=CHAT_TOOLS
        )
        call = chat.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert call.function.name == "get_weather"  # type: ignore[union-attr]
        assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]

        stream = await client.chat.completions.create(
            model="x", stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "weather?"}],
        )
        names, finish, usage = [], None, None
        async for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                names += [tc.function.name for tc in choice.delta.tool_calls or [] if tc.function]
                finish = choice.finish_reason or finish
        assert names == ["get_weather"] and finish == "tool_calls" and usage is not None

        resp = await client.responses.create(model="x", input="weather?",
                                             tools=[{"type": "function", "name": "get_weather",
                                                     "parameters": WEATHER, "strict": False}])
        assert resp.output[0].type == "function_call" and resp.output[0].name == "get_weather"
        item = resp.output[0]
        followup: Any = [
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": item.call_id, "name": item.name,
             "arguments": item.arguments},
            {"type": "function_call_output", "call_id": item.call_id, "output": "sunny"},
        ]
        final = await client.responses.create(model="x", input=followup)
        assert final.output_text == "Sunny, 21C"
        streamed = [e async for e in await client.responses.create(model="x", input=followup, stream=True)]
        deltas = [cast(Any, e).delta for e in streamed if e.type == "response.output_text.delta"]
        assert deltas == ["Sunny, 21C"] and cast(Any, streamed[-1]).response.output_text == "Sunny, 21C"

        events = [e async for e in await client.responses.create(model="x", input="weather?", stream=True)]
        kinds = [e.type for e in events]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert "response.function_call_arguments.done" in kinds
    calls = proxy.pop_calls("r2")
    assert [c.api for c in calls] == ["chat", "chat"] + ["responses"] * 4


async def test_sse_chat_shape(asgi: tuple[ModelProxy, httpx.AsyncClient]) -> None:
    _, client = asgi
    r = await client.post("/v1/chat/completions", json={"messages": HI, "stream": True})
    events = sse(r.text)
    assert events[-1] == (None, "[DONE]")
    assert events[0][1]["choices"][0]["delta"]["role"] == "assistant"
    assert orjson.loads(orjson.dumps(events[-2][1]))["choices"][0]["finish_reason"] == "stop"
    with pytest.raises(ModelError):
        await ModelProxy(ScriptedBackend("null", failure_rate=1.0)).complete(None, "chat", {"messages": HI})


def test_translate_edge_cases() -> None:
    chat = responses.responses_to_chat({
        "instructions": "sys", "text": {"format": {"type": "json_schema", "name": "a", "schema": {}}},
        "tools": [{"type": "custom", "name": "apply_patch"}, {"type": "web_search"}],
        "reasoning": {"effort": "low"}, "tool_choice": {"type": "function", "name": "apply_patch"},
        "input": [{"role": "developer", "content": "dev"}, {"role": "user", "content": "go"},
                  {"type": "reasoning", "summary": []},
                  {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** patch"},
                  {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"}],
    })
    assert chat["messages"][0] == {"role": "system", "content": "sys\n\ndev"}
    assert json.loads(chat["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {"input": "*** patch"}
    assert [t["function"]["name"] for t in chat["tools"]] == ["apply_patch"]
    assert chat["response_format"]["json_schema"]["name"] == "a" and chat["reasoning_effort"] == "low"
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}
    call = {"id": "c2", "type": "function",
            "function": {"name": "apply_patch", "arguments": '{"input": "p"}'}}
    resp = {"id": "x",
            "choices": [{"message": {"content": None, "tool_calls": [call]}, "finish_reason": "length"}]}
    out = responses.chat_to_responses(resp, {"tools": [{"type": "custom", "name": "apply_patch"}]})
    assert out["status"] == "incomplete" and out["output"][0]["type"] == "custom_tool_call"
    assert out["output"][0]["input"] == "p"
    with pytest.raises(translate.TranslationError, match=r"input\[0\]"):
        responses.responses_to_chat({"input": [3]})
    stopped = {"choices": [{"message": {"content": "ab"}, "finish_reason": "stop", "stop_reason": "END"}]}
    msg = anthropic.chat_to_messages(stopped, {"stop_sequences": ["END"]})
    assert msg["stop_reason"] == "stop_sequence" and msg["stop_sequence"] == "END"
    broken = {"id": "t", "function": {"name": "f", "arguments": "{"}}
    bad_args = {"choices": [{"message": {"tool_calls": [broken]}}]}
    assert anthropic.chat_to_messages(bad_args)["content"][0]["input"] == {"_unparsed_arguments": "{"}


def test_anthropic_system_turns_inside_messages_become_system_messages() -> None:
    chat = anthropic.messages_to_chat({"model": "c", "max_tokens": 10, "system": "top",
                                       "messages": [{"role": "user", "content": "hi"},
                                                    {"role": "system", "content": "reminder"},
                                                    {"role": "user", "content": "again"}]})
    assert [(m["role"], m["content"]) for m in chat["messages"]] == [
        ("system", "top"), ("user", "hi"), ("system", "reminder"), ("user", "again")]
