"""The OpenAI Responses API dialect, both ways through chat: a Responses request from a harness (Codex)
as a chat request and the chat answer as a Responses ``response`` (the proxy's face), and a chat request as
a Responses request with the answer back as a chat completion (backends that speak only Responses). Pure
data shuffling; the shared pieces are in ``translate.py``."""

from __future__ import annotations

import time
from typing import Any, Literal

from palaestra.wire.translate import (
    MAX_TOKEN_COUNT,
    Body,
    TranslationError,
    _choice,
    _dumps,
    _loads_object,
    _pass,
    _text_of,
    _typed,
    _usage,
    token_count,
)

_FUNCTION_TOOLS = ("function", "custom")  # hosted tools (web_search, ...) cannot reach a chat model


def _merge_leading_system(messages: list[Body]) -> list[Body]:
    """Fold leading system messages into one: many chat templates accept a system message only first."""
    n = 0
    while n < len(messages) and messages[n]["role"] == "system" and isinstance(messages[n]["content"], str):
        n += 1
    if n < 2:
        return messages
    merged = {"role": "system", "content": "\n\n".join(m["content"] for m in messages[:n])}
    return [merged, *messages[n:]]


def _add_tool_call(messages: list[Body], call: Body) -> None:
    """Attach a call to the preceding assistant message, so parallel calls stay one turn."""
    if messages and messages[-1]["role"] == "assistant":
        messages[-1].setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})



# ---- Responses → chat (for harnesses that speak the Responses API) -----------------------------------
def _responses_content(role: str, content: Any) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TranslationError(f"Responses input message content must be a string or a list: {content!r:.80}")
    parts: list[Body] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text", "refusal"):
            parts.append({"type": "text", "text": part.get("text", part.get("refusal", ""))})
        elif kind == "input_image" and role == "user":
            url = part.get("image_url") or part.get("file_id", "")
            image = {"url": url, "detail": part.get("detail", "auto")}
            parts.append({"type": "image_url", "image_url": image})
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


ReasoningMode = Literal["drop", "reasoning_content", "reasoning", "both"]
REASONING_MODES: tuple[ReasoningMode, ...] = ("drop", "reasoning_content", "reasoning", "both")


def reasoning_text(item: Body) -> str:
    """The text of a Responses ``reasoning`` item: its raw ``content`` (reasoning_text parts) when it has
    any, else its ``summary`` parts joined by blank lines (``encrypted_content`` is opaque: no text)."""
    content = [p.get("text") for p in item.get("content") or [] if isinstance(p, dict)]
    texts = [t for t in content if isinstance(t, str) and t]
    if not texts:
        summary = [p.get("text") for p in item.get("summary") or [] if isinstance(p, dict)]
        return "\n\n".join(t for t in summary if isinstance(t, str) and t)
    return "".join(texts)


def _attach_reasoning(message: Body, text: str, mode: ReasoningMode) -> None:
    """Reasoning on an assistant message under the key(s) chat servers read: vLLM before 0.16 reads
    ``reasoning_content``, later versions ``reasoning``; a message that already has some gets the rest
    appended (several reasoning items of one turn)."""
    keys: tuple[str, ...] = ("reasoning_content", "reasoning") if mode == "both" else (mode,)
    for key in keys:
        message[key] = f"{message[key]}\n\n{text}" if message.get(key) else text


@_typed
def responses_to_chat(body: Body, *, reasoning: ReasoningMode = "drop") -> Body:
    """A Responses API request as a chat request (``instructions`` becomes the system message).

    ``reasoning`` says what becomes of the input's ``reasoning`` items: ``drop`` them (what a plain
    chat API takes: the proxy's default, since OpenAI's own chat API has no such field), or put their
    text on the assistant message of the same turn (the one that follows them) under
    ``reasoning_content`` / ``reasoning`` / both, as vLLM and SGLang read it back into the chat
    template. A reasoning item that no assistant output follows belongs to no turn and is dropped."""
    if reasoning not in REASONING_MODES:
        raise TranslationError(f"reasoning mode must be one of {', '.join(REASONING_MODES)}, got {reasoning!r}")
    if not isinstance(body, dict):
        raise TranslationError("a Responses API request must be a JSON object")
    messages: list[Body] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": _text_of(body["instructions"])})
    items = body.get("input", [])
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise TranslationError("Responses API 'input' must be a string or a list of items")
    pending: list[str] = []  # reasoning texts waiting for the assistant output of their turn
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise TranslationError(f"Responses API input[{i}] must be an object, got {type(item).__name__}")
        kind = item.get("type", "message")
        if kind == "message":
            role = str(item.get("role") or "user")
            role = "system" if role == "developer" else role
            messages.append({"role": role, "content": _responses_content(role, item.get("content", ""))})
            if role != "assistant":
                pending.clear()  # a turn that ended in no assistant output: its reasoning has nowhere to go
        elif kind in ("function_call", "custom_tool_call"):
            args = item.get("arguments", "{}") if kind == "function_call" else {"input": item.get("input")}
            fn = {"name": item.get("name", ""), "arguments": _dumps(args)}
            call_id = item.get("call_id") or item.get("id") or f"call_{i}"
            _add_tool_call(messages, {"id": call_id, "type": "function", "function": fn})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append({"role": "tool", "tool_call_id": item.get("call_id", ""),
                             "content": _text_of(item.get("output", ""))})
            pending.clear()
            continue
        elif kind == "reasoning":
            if reasoning != "drop" and (text := reasoning_text(item)):
                pending.append(text)
            continue
        else:
            continue  # item_reference and hosted-tool items carry nothing a chat backend can take
        if pending and messages and messages[-1]["role"] == "assistant":
            _attach_reasoning(messages[-1], "\n\n".join(pending), reasoning)
            pending.clear()
    chat: Body = {"messages": _merge_leading_system(messages)}
    _pass(body, chat, "model", "temperature", "top_p", "parallel_tool_calls", "seed", "user")
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if tools := [_responses_tool(t) for t in body.get("tools") or [] if t.get("type") in _FUNCTION_TOOLS]:
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and (choice.get("name") or isinstance(choice.get("function"), dict)):
        name = choice.get("name") or choice["function"].get("name")  # flat (Responses) or Chat-style
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif isinstance(choice, str):
        chat["tool_choice"] = choice
    fmt = (body.get("text") or {}).get("format") or {}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    if effort := (body.get("reasoning") or {}).get("effort"):
        chat["reasoning_effort"] = effort
    return chat


def _responses_tool(tool: Body) -> Body:
    """A Responses tool as a chat tool. Responses tools are flat (``{"type": "function", "name": ...,
    "parameters": ...}``); a Chat-style one (``{"type": "function", "function": {...}}``), which NeMo
    Gym rows and hand-written requests also carry, is already in chat form and passes as it is."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        return {"type": "function", "function": dict(tool["function"])}
    if tool.get("type") == "custom":  # free-form tools (Codex apply_patch) take one string argument
        params: Any = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
    else:
        params = tool.get("parameters") or {"type": "object", "properties": {}}
    fn: Body = {"name": tool.get("name", ""), "parameters": params}
    _pass(tool, fn, "description", "strict")
    return {"type": "function", "function": fn}


@_typed
def chat_to_responses(chat: Body, request: Body | None = None) -> Body:
    """A chat response as a Responses API ``response`` object."""
    request = request or {}
    message, finish = _choice(chat)
    base_id = str(chat.get("id") or f"{time.time_ns():x}")
    custom = {t.get("name") for t in request.get("tools") or [] if t.get("type") == "custom"}
    output: list[Body] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        output.append({"type": "reasoning", "id": f"rs_{base_id}", "summary": [],
                       "content": [{"type": "reasoning_text", "text": reasoning}]})
    text = _text_of(message.get("content"))
    calls = message.get("tool_calls") or []
    if text or not calls:
        output.append({"type": "message", "id": f"msg_{base_id}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    for j, call in enumerate(calls):
        fn = call.get("function") or {}
        call_id = call.get("id") or f"call_{base_id}_{j}"
        name, args = fn.get("name", ""), _dumps(fn.get("arguments", "{}"))
        if name in custom:
            parsed = _loads_object(args) or {}
            output.append({"type": "custom_tool_call", "id": f"ctc_{call_id}", "call_id": call_id,
                           "name": name, "input": str(parsed.get("input", args)), "status": "completed"})
        else:
            output.append({"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
                           "arguments": args, "status": "completed"})
    inp, out = _usage(chat)
    incomplete = finish == "length"
    return {
        "id": f"resp_{base_id}", "object": "response", "created_at": _created(chat),
        "status": "incomplete" if incomplete else "completed", "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "model": chat.get("model") or request.get("model") or "", "output": output,
        "instructions": request.get("instructions"), "max_output_tokens": request.get("max_output_tokens"),
        "parallel_tool_calls": request.get("parallel_tool_calls", True), "previous_response_id": None,
        "temperature": request.get("temperature"), "top_p": request.get("top_p"),
        "tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools") or [],
        "text": request.get("text") or {"format": {"type": "text"}},
        "metadata": request.get("metadata") or {},
        "usage": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }


def _created(chat: Body) -> int:
    """The response's Unix time; one that is not a plausible whole number of seconds is now."""
    created = chat.get("created")
    if isinstance(created, bool) or not isinstance(created, int) or not 0 < created <= MAX_TOKEN_COUNT:
        return int(time.time())
    return created



# ---- Chat → Responses (for models that speak the Responses API) --------------------------------------
def _responses_parts(role: str, content: Any) -> Any:
    """Chat content as Responses message content: a string stays one; parts become input parts."""
    if not isinstance(content, list):
        return "" if content is None else content if isinstance(content, str) else _dumps(content)
    parts: list[Body] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": "output_text" if role == "assistant" else "input_text", "text": part.get("text", "")})
        elif kind == "image_url":
            image = part.get("image_url") or {}
            url = image.get("url", "") if isinstance(image, dict) else str(image)
            parts.append({"type": "input_image", "image_url": url,
                          "detail": image.get("detail", "auto") if isinstance(image, dict) else "auto"})
    return parts


def chat_messages_to_responses_input(messages: list[Body]) -> list[Body]:
    """Chat messages as Responses input items, the inverse of ``responses_to_chat``: an assistant turn's
    reasoning (``reasoning_content`` or ``reasoning``) becomes a reasoning item before its output, its text
    an assistant message, its calls ``function_call`` items; tool messages ``function_call_output``."""
    items: list[Body] = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            reasoning = m.get("reasoning_content") or m.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                items.append({"type": "reasoning", "id": f"rs_{i}", "summary": [{"type": "summary_text",
                                                                                    "text": reasoning}]})
            text = _text_of(m.get("content"))
            if text:
                items.append({"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": text, "annotations": []}]})
            for j, call in enumerate(m.get("tool_calls") or []):
                fn = call.get("function") or {}
                items.append({"type": "function_call", "call_id": call.get("id") or f"call_{i}_{j}",
                              "name": fn.get("name", ""), "arguments": _dumps(fn.get("arguments", "{}"))})
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id", ""),
                          "output": _text_of(m.get("content"))})
        else:
            items.append({"type": "message", "role": str(role or "user"),
                          "content": _responses_parts(str(role), m.get("content"))})
    return items


@_typed
def chat_to_responses_request(chat: Body) -> Body:
    """A chat request as a Responses API request (tools flattened, ``max_tokens`` → ``max_output_tokens``,
    ``response_format`` → ``text.format``, ``reasoning_effort`` → ``reasoning.effort``)."""
    body: Body = {"input": chat_messages_to_responses_input(chat.get("messages") or [])}
    _pass(chat, body, "model", "temperature", "top_p", "parallel_tool_calls", "user")
    limit = chat.get("max_completion_tokens") if chat.get("max_tokens") is None else chat.get("max_tokens")
    if limit is not None:
        body["max_output_tokens"] = limit
    tools = []
    for t in chat.get("tools") or []:
        fn = t.get("function") if isinstance(t.get("function"), dict) else None
        if t.get("type") == "function" and fn is not None:
            flat: Body = {"type": "function", "name": fn.get("name", ""),
                          "parameters": fn.get("parameters") or {"type": "object", "properties": {}}}
            _pass(fn, flat, "description", "strict")
            tools.append(flat)
    if tools:
        body["tools"] = tools
    choice = chat.get("tool_choice")
    if isinstance(choice, dict):
        body["tool_choice"] = {"type": "function", "name": (choice.get("function") or {}).get("name", "")}
    elif isinstance(choice, str):
        body["tool_choice"] = choice
    fmt = chat.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        body["text"] = {"format": {"type": "json_schema", **(fmt.get("json_schema") or {})}}
    elif fmt.get("type") == "json_object":
        body["text"] = {"format": {"type": "json_object"}}
    if chat.get("reasoning_effort"):
        body["reasoning"] = {"effort": chat["reasoning_effort"]}
    return body


@_typed
def responses_to_chat_completion(response: Body) -> Body:
    """A Responses API ``response`` as a chat completion: output text joined, function calls as
    ``tool_calls``, reasoning as ``reasoning_content``; an incomplete response finishes with ``length``."""
    output = response.get("output") or []
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[Body] = []
    for item in output:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            text.append(_text_of(item.get("content")))
        elif kind == "reasoning":
            reasoning.append(reasoning_text(item))
        elif kind == "function_call":
            calls.append({"id": item.get("call_id") or item.get("id") or f"call_{len(calls)}", "type": "function",
                          "function": {"name": item.get("name", ""), "arguments": _dumps(item.get("arguments", "{}"))}})
    message: Body = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    if any(reasoning):
        message["reasoning_content"] = "\n\n".join(r for r in reasoning if r)
    finish = "tool_calls" if calls else "length" if response.get("status") == "incomplete" else "stop"
    usage: Body = response["usage"] if isinstance(response.get("usage"), dict) else {}
    inp, out = token_count(usage.get("input_tokens")) or 0, token_count(usage.get("output_tokens")) or 0
    created = response.get("created_at")
    return {"id": str(response.get("id") or ""), "object": "chat.completion",
            "created": int(created) if isinstance(created, (int, float)) and not isinstance(created, bool) else 0,
            "model": response.get("model") or "",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}}
