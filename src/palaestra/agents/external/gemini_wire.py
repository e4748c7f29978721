"""Google's Gemini API dialect (``generateContent``) on a CLI's model endpoint, translated to chat.

Gemini CLI has no OpenAI-compatible mode: with ``GOOGLE_GEMINI_BASE_URL`` set it sends Gemini API
requests (``POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse``, ``:generateContent``,
``:countTokens``) to that URL. So the rollout's endpoint answers those too: each request becomes one
chat request that goes through the same proxy (and so through the rollout's recorded ChatModel) as the
other dialects, and the chat answer goes back as a ``GenerateContentResponse`` (one SSE event when
streaming: the backend contract is non-streaming, as for the other dialects).

The mapping: ``systemInstruction`` → a system message; ``contents`` turns with role ``model`` →
assistant messages (``functionCall`` parts → tool calls), other turns → user messages
(``functionResponse`` parts → tool messages, matched by id, or by name in order when a call has none);
``functionDeclarations`` → chat tools (Gemini's upper-case schema types lowered); ``toolConfig`` →
``tool_choice``; ``generationConfig`` → the chat sampling fields and ``response_format``. Thought parts
are the model's own reasoning echoed back and are dropped, as the Gemini API ignores them on input.
A call's arguments travel as an object in Gemini's shape; when the CLI sends back a call this endpoint
answered, its arguments are the model's own string again (not a re-serialization), so the next prompt
extends the previous prompt and generation token for token.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from palaestra.core.errors import ModelError
from palaestra.server.model_proxy import ModelProxy
from palaestra.wire.requests import InvalidRequest
from palaestra.wire.translate import TranslationError

Body = dict[str, Any]
FINISH = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP", "content_filter": "SAFETY"}
STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "UNAVAILABLE"}
SAMPLING = {"temperature": "temperature", "topP": "top_p", "maxOutputTokens": "max_tokens", "stopSequences": "stop",
            "candidateCount": "n", "seed": "seed", "presencePenalty": "presence_penalty",
            "frequencyPenalty": "frequency_penalty"}


def json_schema(schema: Any) -> Any:
    """A Gemini ``Schema`` (OpenAPI subset, types like ``OBJECT``) as JSON Schema."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: json_schema(v) for k, v in schema.items() if k != "nullable"}
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
        if schema.get("nullable") is True:
            out["type"] = [out["type"], "null"]
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {k: json_schema(v) for k, v in schema["properties"].items()}
    return out


def _text(parts: Any) -> str:
    return "".join(str(p["text"]) for p in parts or [] if isinstance(p, dict) and "text" in p and not p.get("thought"))


def _tool_output(response: Any) -> str:
    """A ``functionResponse.response`` as tool-message text: Gemini CLI's ``{"output": text}`` as the text."""
    if isinstance(response, dict) and set(response) == {"output"} and isinstance(response["output"], str):
        return response["output"]
    return json.dumps(response, ensure_ascii=False)


def _arguments(call_id: str, args: Any, sent: Mapping[str, str]) -> str:
    """A call's arguments as chat text: the very string the model produced when this endpoint answered the
    call (Gemini carries them as an object, and re-serializing could change spacing or key order, which
    would break the token-level continuity of the next prompt), else the object as JSON."""
    original = sent.get(call_id)
    if original is not None:
        try:
            if json.loads(original) == (args or {}):
                return original
        except ValueError:
            pass
    return json.dumps(args or {})


def gemini_to_chat(model: str, body: Body, sent: Mapping[str, str] | None = None) -> Body:
    """A Gemini ``GenerateContentRequest`` as a chat request. ``sent`` maps the ids of tool calls this
    endpoint answered to their arguments as the model wrote them."""
    sent = sent or {}
    messages: list[Body] = []
    system = body.get("systemInstruction") or body.get("system_instruction")
    if system:
        text = system if isinstance(system, str) else _text(system.get("parts") if isinstance(system, dict) else [])
        if text:
            messages.append({"role": "system", "content": text})
    pending: list[tuple[str, str]] = []  # (id, name) of calls not answered yet, for responses without an id
    for turn, content in enumerate(body.get("contents") or []):
        if not isinstance(content, dict):
            raise TranslationError(f"contents[{turn}] is not an object")
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        if content.get("role") == "model":
            calls = []
            for i, part in enumerate(p["functionCall"] for p in parts if isinstance(p.get("functionCall"), dict)):
                call_id = str(part.get("id") or f"call_{turn}_{i}")
                pending.append((call_id, str(part.get("name", ""))))
                calls.append({"id": call_id, "type": "function", "function": {
                    "name": str(part.get("name", "")), "arguments": _arguments(call_id, part.get("args"), sent)}})
            message: Body = {"role": "assistant", "content": _text(parts) or None}
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            continue
        for part in (p["functionResponse"] for p in parts if isinstance(p.get("functionResponse"), dict)):
            name = str(part.get("name", ""))
            call_id = part.get("id") or next((cid for cid, n in pending if n == name), f"call_{turn}_{name}")
            pending = [(cid, n) for cid, n in pending if cid != call_id]
            output = _tool_output(part.get("response"))
            messages.append({"role": "tool", "tool_call_id": str(call_id), "content": output})
        user: list[Body] = []
        for part in parts:
            if "text" in part and not part.get("thought"):
                user.append({"type": "text", "text": str(part["text"])})
            elif isinstance(part.get("inlineData"), dict):
                data = part["inlineData"]
                user.append({"type": "image_url", "image_url": {
                    "url": f"data:{data.get('mimeType', 'application/octet-stream')};base64,{data.get('data', '')}"}})
        if user:
            only_text = all(p["type"] == "text" for p in user)
            messages.append({"role": "user", "content": "".join(p["text"] for p in user) if only_text else user})
    chat: Body = {"model": model, "messages": messages}
    tools = [{"type": "function", "function": {
        "name": fd.get("name", ""), "description": fd.get("description", ""),
        "parameters": fd.get("parametersJsonSchema") or json_schema(fd.get("parameters"))
        or {"type": "object", "properties": {}}}}
        for tool in body.get("tools") or [] if isinstance(tool, dict)
        for fd in tool.get("functionDeclarations") or [] if isinstance(fd, dict)]
    if tools:
        chat["tools"] = tools
        mode_cfg = (body.get("toolConfig") or {}).get("functionCallingConfig") or {}
        mode, allowed = str(mode_cfg.get("mode", "AUTO")).upper(), mode_cfg.get("allowedFunctionNames") or []
        if mode == "NONE":
            chat["tool_choice"] = "none"
        elif mode in ("ANY", "VALIDATED"):
            chat["tool_choice"] = ({"type": "function", "function": {"name": allowed[0]}} if len(allowed) == 1
                                   else "required")
    config = body.get("generationConfig") or {}
    chat.update({chat_key: config[key] for key, chat_key in SAMPLING.items() if config.get(key) is not None})
    schema = config.get("responseJsonSchema") or json_schema(config.get("responseSchema"))
    if schema:
        chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    elif config.get("responseMimeType") == "application/json":
        chat["response_format"] = {"type": "json_object"}
    return chat


def chat_to_gemini(resp: Body) -> Body:
    """A chat completion as a ``GenerateContentResponse``."""
    candidates = []
    for index, choice in enumerate(resp.get("choices") or []):
        message = choice.get("message") or {}
        content = message.get("content")
        text = content if isinstance(content, str) else _text(content) if isinstance(content, list) else ""
        parts: list[Body] = [{"text": text}] if text else []
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {"arguments": fn.get("arguments")}
            parts.append({"functionCall": {"id": call.get("id"), "name": fn.get("name", ""),
                                           "args": args if isinstance(args, dict) else {"value": args}}})
        candidates.append({"content": {"role": "model", "parts": parts or [{"text": ""}]}, "index": index,
                           "finishReason": FINISH.get(str(choice.get("finish_reason")), "STOP")})
    usage = resp.get("usage") or {}
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return {"candidates": candidates, "modelVersion": resp.get("model", ""), "responseId": resp.get("id", ""),
            "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                              "totalTokenCount": int(usage.get("total_tokens") or prompt + completion)}}


def _reply(data: Body, status: int = 200, sse: bool = False) -> Response:
    if sse:
        return Response(b"data: " + orjson.dumps(data) + b"\n\n", media_type="text/event-stream",
                        headers={"cache-control": "no-cache"})
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _error(message: str, status: int) -> Response:
    """Google's error envelope (``error.code``, ``message``, ``status``), which its SDK reads."""
    return _reply({"error": {"code": status, "message": message, "status": STATUS.get(status, "UNKNOWN")}}, status)


def gemini_routes(proxy: ModelProxy) -> list[Route]:
    """``POST /rollouts/{rollout_id}/{version}/models/{model}:{method}`` for the three methods."""

    sent: dict[str, str] = {}  # tool-call id -> arguments as the model wrote them (one endpoint per rollout)

    async def handle(request: Request) -> Response:
        model, _, method = str(request.path_params["target"]).rpartition(":")
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            return _error(f"request body is not valid JSON ({exc})", 400)
        if not isinstance(body, dict):
            return _error("request body must be a JSON object", 400)
        if method == "countTokens":  # an estimate (chars/4), as the proxy gives Claude Code: no tokenizer here
            request_body = body.get("generateContentRequest") or body
            return _reply({"totalTokens": len(orjson.dumps(request_body.get("contents") or [])) // 4})
        if method not in ("generateContent", "streamGenerateContent"):
            return _error(f"unsupported method {method!r}: this endpoint serves generateContent, "
                          "streamGenerateContent and countTokens", 404)
        try:
            chat = gemini_to_chat(model, body, sent)
            result = await proxy.complete(request.path_params["rollout_id"], "chat", chat)
        except (InvalidRequest, TranslationError) as exc:
            return _error(str(exc), 400)
        except ModelError as exc:
            return _error(exc.message, exc.status if exc.status and 400 <= exc.status < 500 else 502)
        for choice in result.get("choices") or []:
            for call in (choice.get("message") or {}).get("tool_calls") or []:
                if call.get("id") and isinstance((call.get("function") or {}).get("arguments"), str):
                    sent[str(call["id"])] = call["function"]["arguments"]
        return _reply(chat_to_gemini(result), sse=method == "streamGenerateContent")

    return [Route("/rollouts/{rollout_id}/{version}/models/{target}", handle, methods=["POST"])]
