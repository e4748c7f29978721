"""The Gemini API dialect of a CLI's model endpoint (agents/external/gemini_wire.py): Gemini CLI's
requests become chat requests that keep every turn, tool call and tool result (so the recorded
conversation is the one the CLI sent), and chat answers go back in the shape Google's SDK reads, over
the real HTTP routes with the scripted model behind a real proxy."""

from __future__ import annotations

import json
from typing import Any

import httpx
from starlette.applications import Starlette

from palaestra.agents.external.gemini_wire import chat_to_gemini, gemini_routes, gemini_to_chat, json_schema
from palaestra.core.errors import ModelError
from palaestra.models.scripted import ScriptedBackend
from palaestra.server.model_proxy import ModelProxy

SHELL = {"name": "run_shell_command", "description": "Run a command",
         "parameters": {"type": "OBJECT", "properties": {"command": {"type": "STRING"},
                                                           "dir": {"type": "STRING", "nullable": True}},
                        "required": ["command"]}}


def conversation() -> dict[str, Any]:
    return {
        "systemInstruction": {"role": "user", "parts": [{"text": "You are a CLI."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "make a file"}]},
            {"role": "model", "parts": [{"text": "thinking it over", "thought": True},
                                        {"functionCall": {"id": "c1", "name": "run_shell_command",
                                                          "args": {"command": "touch a"}}},
                                        {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"id": "c1", "name": "run_shell_command",
                                                             "response": {"output": "ok"}}},
                                       {"functionResponse": {"name": "run_shell_command",
                                                             "response": {"output": "a", "exit": 0}}}]},
        ],
        "tools": [{"functionDeclarations": [SHELL]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["run_shell_command"]}},
        "generationConfig": {"temperature": 0.5, "topP": 0.9, "maxOutputTokens": 64, "thinkingConfig": {}},
    }


def test_a_gemini_conversation_becomes_the_same_chat_conversation() -> None:
    chat = gemini_to_chat("m", conversation())
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    system, user, assistant, first, second = chat["messages"]
    assert system["content"] == "You are a CLI." and user["content"] == "make a file"
    assert assistant["content"] is None  # the thought part is the model's own reasoning, not its text
    calls = assistant["tool_calls"]
    assert [c["id"] for c in calls] == ["c1", "call_1_1"]  # an id-less call gets one from its position
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"command": "touch a"}, {"command": "ls"}]
    # Results are matched to their calls: by id, else the first unanswered call of that name.
    assert (first["tool_call_id"], first["content"]) == ("c1", "ok")
    assert second["tool_call_id"] == "call_1_1" and json.loads(second["content"]) == {"output": "a", "exit": 0}
    params = chat["tools"][0]["function"]["parameters"]
    assert params["type"] == "object" and params["properties"]["dir"]["type"] == ["string", "null"]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "run_shell_command"}}
    assert (chat["temperature"], chat["top_p"], chat["max_tokens"]) == (0.5, 0.9, 64)
    assert "thinkingConfig" not in json.dumps(chat)


def test_a_schema_request_asks_for_json_and_none_mode_forbids_tools() -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "q"}]}], "tools": [{"functionDeclarations": [SHELL]}],
            "toolConfig": {"functionCallingConfig": {"mode": "NONE"}},
            "generationConfig": {"responseMimeType": "application/json",
                                 "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "INTEGER"}}}}}
    chat = gemini_to_chat("m", body)
    assert chat["tool_choice"] == "none"
    assert chat["response_format"]["json_schema"]["schema"] == {"type": "object",
                                                                "properties": {"a": {"type": "integer"}}}
    assert json_schema({"type": "ARRAY", "items": {"type": "NUMBER"}}) == {"type": "array", "items": {"type": "number"}}


def test_a_chat_answer_goes_back_as_a_gemini_candidate_with_ids_and_usage() -> None:
    resp = {"id": "r1", "model": "m", "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            "choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Let me look.",
                         "tool_calls": [{"id": "k9", "type": "function", "function": {
                             "name": "run_shell_command", "arguments": "{\"command\": \"ls\"}"}}]}}]}
    out = chat_to_gemini(resp)
    parts = out["candidates"][0]["content"]["parts"]
    assert parts == [{"text": "Let me look."},
                     {"functionCall": {"id": "k9", "name": "run_shell_command", "args": {"command": "ls"}}}]
    assert out["candidates"][0]["finishReason"] == "STOP" and out["responseId"] == "r1"
    assert out["usageMetadata"] == {"promptTokenCount": 10, "candidatesTokenCount": 3, "totalTokenCount": 13}
    # The id comes back on the next request's functionResponse, and maps to the same chat tool call.
    again = gemini_to_chat("m", {"contents": [{"role": "model", "parts": parts}, {"role": "user", "parts": [
        {"functionResponse": {"id": "k9", "name": "run_shell_command", "response": {"output": "x"}}}]}]})
    assert again["messages"][0]["tool_calls"][0]["id"] == again["messages"][1]["tool_call_id"] == "k9"


class Failing(ScriptedBackend):
    async def chat(self, request: dict[str, Any], ctx: Any = None) -> dict[str, Any]:
        raise ModelError("backend down", status=503)


async def _post(target: ModelProxy | Starlette, path: str, body: dict[str, Any]) -> httpx.Response:
    app = Starlette(routes=gemini_routes(target)) if isinstance(target, ModelProxy) else target
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        return await client.post(path, json=body)


class OddlySpaced(ScriptedBackend):
    """A model whose tool-call arguments are not what ``json.dumps`` would write."""

    async def chat(self, request: dict[str, Any], ctx: Any = None) -> dict[str, Any]:
        call = {"id": "t1", "type": "function", "function": {"name": "run_shell_command",
                                                             "arguments": '{"command":"ls" ,"dir":null}'}}
        return {"id": "x", "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [call]}}]}


async def test_a_call_sent_back_keeps_the_models_own_argument_text() -> None:
    proxy = ModelProxy(OddlySpaced("null"))
    proxy.register("r1")
    app = Starlette(routes=gemini_routes(proxy))
    first = await _post(app, "/rollouts/r1/v1beta/models/m:generateContent",
                        {"contents": [{"role": "user", "parts": [{"text": "go"}]}]})
    model_turn = first.json()["candidates"][0]["content"]
    assert model_turn["parts"][0]["functionCall"]["args"] == {"command": "ls", "dir": None}
    await _post(app, "/rollouts/r1/v1beta/models/m:generateContent", {"contents": [
        {"role": "user", "parts": [{"text": "go"}]}, model_turn,
        {"role": "user", "parts": [{"functionResponse": {"id": "t1", "name": "run_shell_command",
                                                         "response": {"output": "a"}}}]}]})
    second = proxy.pop_calls("r1")[-1].request["messages"]
    assert second[1]["tool_calls"][0]["function"]["arguments"] == '{"command":"ls" ,"dir":null}'
    # Arguments the CLI changed are its own: they go as JSON of what it sent.
    assert json.loads(gemini_to_chat("m", {"contents": [{"role": "model", "parts": [{"functionCall": {
        "id": "t1", "name": "run_shell_command", "args": {"command": "pwd"}}}]}]}, {"t1": '{"command":"ls"}'})[
        "messages"][0]["tool_calls"][0]["function"]["arguments"]) == {"command": "pwd"}


async def test_the_routes_answer_plain_streamed_and_counted_requests_and_record_the_call() -> None:
    proxy = ModelProxy(ScriptedBackend("replay", replay=[{"content": "hello there"}]))
    proxy.register("r1")
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    plain = await _post(proxy, "/rollouts/r1/v1beta/models/m:generateContent", body)
    assert plain.status_code == 200
    assert plain.json()["candidates"][0]["content"]["parts"] == [{"text": "hello there"}]
    streamed = await _post(proxy, "/rollouts/r1/v1beta/models/m:streamGenerateContent?alt=sse", body)
    assert streamed.headers["content-type"].startswith("text/event-stream")
    event = json.loads(streamed.text.removeprefix("data: ").strip())
    assert event["candidates"][0]["content"]["parts"] == [{"text": "hello there"}]
    counted = await _post(proxy, "/rollouts/r1/v1beta/models/m:countTokens", body)
    assert counted.json()["totalTokens"] > 0
    calls = proxy.pop_calls("r1")  # both generations went through the proxy, in chat form; counting did not
    assert len(calls) == 2 and all(c.request["messages"] == [{"role": "user", "content": "hi"}] for c in calls)


async def test_errors_come_back_in_googles_envelope() -> None:
    proxy = ModelProxy(Failing("null"))
    down = await _post(proxy, "/rollouts/r1/v1beta/models/m:generateContent",
                       {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    assert down.status_code == 502 and down.json()["error"]["status"] == "UNAVAILABLE"
    assert "backend down" in down.json()["error"]["message"]
    bad = await _post(proxy, "/rollouts/r1/v1beta/models/m:embedContent", {"content": {}})
    assert bad.status_code == 404 and bad.json()["error"]["code"] == 404
    empty = await _post(proxy, "/rollouts/r1/v1beta/models/m:generateContent", {"contents": []})
    assert empty.status_code == 400 and empty.json()["error"]["status"] == "INVALID_ARGUMENT"
