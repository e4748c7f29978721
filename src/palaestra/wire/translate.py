"""Pure translations between the OpenAI Responses / Anthropic Messages dialects and Chat Completions.

Backends speak one dialect (chat), so each implements one method, while CLI harnesses (Codex speaks
Responses, Claude Code speaks Messages) run unmodified against any backend. No I/O, no mutation."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import orjson

Body = dict[str, Any]
_FUNCTION_TOOLS = ("function", "custom")  # hosted tools (web_search, ...) cannot reach a chat model


def _typed(fn: Callable[..., Body]) -> Callable[..., Body]:
    """A malformed body (a field of the wrong type anywhere) is the client's error: TranslationError
    (answered 400 naming it), never an AttributeError deep inside (answered 500)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Body:
        try:
            return fn(*args, **kwargs)
        except TranslationError:
            raise
        except Exception as exc:  # pure data shuffling: any failure means a malformed body
            raise TranslationError(f"{fn.__name__}: malformed body ({type(exc).__name__}: {exc})") from None

    return wrapper


class TranslationError(ValueError):
    """The request does not have the shape its API requires; the proxy answers it with HTTP 400."""


def _dumps(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _text_of(content: Any) -> str:
    """Text of a content value given as a string or a list of text-ish parts/blocks."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else _dumps(content)


def _pass(src: Body, dst: Body, *keys: str) -> None:
    dst.update({key: src[key] for key in keys if src.get(key) is not None})


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


def _choice(chat: Body) -> tuple[Body, str | None]:
    first = (chat.get("choices") or [{}])[0]
    return first.get("message") or {}, first.get("finish_reason")


MAX_TOKEN_COUNT = 2**53 - 1


def token_count(value: Any) -> int | None:
    """A backend's token count, or None where it is not a plausible one.

    A count is data the backend sent, not something to trust: only a whole, non-negative JSON number up
    to ``MAX_TOKEN_COUNT`` is kept (an integral float such as ``12.0`` counts as 12). Anything else (a
    string, a bool, NaN, a negative or fractional number, ``1e30``, ``2**64 - 1``) is unknown.

    Why unknown rather than clamped or rejected: the count is bookkeeping beside an answer that is fine,
    so failing the call would throw a good completion away over a number the harness only displays; a
    clamped count would be a made-up figure that looks real in reports and training data, whereas an
    unknown one reads as 0, exactly as a missing count already does. Why ``2**53``: every kept count is
    exact in any JSON reader (JavaScript harnesses such as Claude Code hold numbers as doubles) and any
    sum of counts stays far inside the 64-bit range orjson can write, so the proxy always answers a valid
    body instead of failing to encode it (a plain HTTP 500)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        if not value.is_integer():  # NaN and the infinities are not integers either
            return None
        value = int(value)
    return value if 0 <= value <= MAX_TOKEN_COUNT else None


def _usage(chat: Body) -> tuple[int, int]:
    """Prompt and completion token counts of a chat response; an implausible or missing one is 0 (see
    ``token_count``), and a ``usage`` that is not an object is no usage."""
    usage = chat.get("usage")
    if not isinstance(usage, dict):
        return 0, 0
    return token_count(usage.get("prompt_tokens")) or 0, token_count(usage.get("completion_tokens")) or 0


# ---- OpenAI Responses API ----------------------------------------------------------------------
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


@_typed
def responses_to_chat(body: Body) -> Body:
    """A Responses API request as a chat request (``instructions`` becomes the system message)."""
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
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise TranslationError(f"Responses API input[{i}] must be an object, got {type(item).__name__}")
        kind = item.get("type", "message")
        if kind == "message":
            role = str(item.get("role") or "user")
            role = "system" if role == "developer" else role
            messages.append({"role": role, "content": _responses_content(role, item.get("content", ""))})
        elif kind in ("function_call", "custom_tool_call"):
            args = item.get("arguments", "{}") if kind == "function_call" else {"input": item.get("input")}
            fn = {"name": item.get("name", ""), "arguments": _dumps(args)}
            call_id = item.get("call_id") or item.get("id") or f"call_{i}"
            _add_tool_call(messages, {"id": call_id, "type": "function", "function": fn})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append({"role": "tool", "tool_call_id": item.get("call_id", ""),
                             "content": _text_of(item.get("output", ""))})
        # reasoning, item_reference and hosted-tool items carry nothing a chat backend can take.
    chat: Body = {"messages": _merge_leading_system(messages)}
    _pass(body, chat, "model", "temperature", "top_p", "parallel_tool_calls", "seed", "user")
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if tools := [_responses_tool(t) for t in body.get("tools") or [] if t.get("type") in _FUNCTION_TOOLS]:
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("name"):
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
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


def _loads_object(text: str) -> Body | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


# ---- Anthropic Messages API --------------------------------------------------------------------
def _anthropic_image(block: Body) -> Body:
    src = block.get("source") or {}
    url = src.get("url", "")
    if src.get("type") == "base64":
        url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
    return {"type": "image_url", "image_url": {"url": url}}


def _anthropic_turn(role: str, content: Any, messages: list[Body]) -> None:
    if isinstance(content, str):
        messages.append({"role": role, "content": content})
        return
    if not isinstance(content, list):
        raise TranslationError(f"Anthropic {role} message content must be a string or a list of blocks")
    parts: list[Body] = []
    calls: list[Body] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            parts.append(_anthropic_image(block))
        elif kind == "tool_use":
            fn = {"name": block.get("name", ""), "arguments": _dumps(block.get("input", {}))}
            calls.append({"id": block.get("id", f"toolu_{len(calls)}"), "type": "function", "function": fn})
        elif kind == "tool_result":
            # Tool results must follow the assistant turn directly, before any user text.
            text = _text_of(block.get("content", ""))
            if block.get("is_error"):
                text = f"[tool error] {text}"
            messages.append({"role": "tool", "tool_call_id": block.get("tool_use_id", ""), "content": text})
        # thinking / redacted_thinking / server tool blocks have no chat equivalent and are dropped.
    content_out: Any = "".join(p["text"] for p in parts) if all(p["type"] == "text" for p in parts) else parts
    if role == "assistant" and (content_out or calls):
        extra = {"tool_calls": calls} if calls else {}
        messages.append({"role": "assistant", "content": content_out or None, **extra})
    elif role == "user" and parts:
        messages.append({"role": role, "content": content_out})


@_typed
def messages_to_chat(body: Body) -> Body:
    """An Anthropic Messages request as a chat request."""
    if not isinstance(body, dict):
        raise TranslationError("an Anthropic Messages request must be a JSON object")
    turns = body.get("messages")
    if not isinstance(turns, list):
        raise TranslationError("Anthropic Messages request needs 'messages': a list of {role, content}")
    messages: list[Body] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _text_of(body["system"])})
    for i, turn in enumerate(turns):
        if isinstance(turn, dict) and turn.get("role") == "system":
            # Claude Code 2.x sends system turns inside `messages`; chat models take them as system messages.
            messages.append({"role": "system", "content": _text_of(turn.get("content", ""))})
            continue
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant"):
            raise TranslationError(f"Anthropic messages[{i}] must be an object with role user, assistant or system")
        _anthropic_turn(turn["role"], turn.get("content", ""), messages)
    chat: Body = {"messages": messages}
    _pass(body, chat, "model", "max_tokens", "temperature", "top_p", "top_k")
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    if tools := [
        {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                          "parameters": t.get("input_schema") or {"type": "object"}}}
        for t in body.get("tools") or [] if isinstance(t, dict) and t.get("name") and "input_schema" in t
    ]:
        chat["tools"] = tools
    choice = body.get("tool_choice") or {}
    mapped = {"auto": "auto", "none": "none", "any": "required"}.get(choice.get("type", ""))
    if mapped or choice.get("type") == "tool":
        chat["tool_choice"] = mapped or {"type": "function", "function": {"name": choice.get("name", "")}}
    if choice.get("disable_parallel_tool_use"):
        chat["parallel_tool_calls"] = False
    return chat


@_typed
def chat_to_messages(chat: Body, request: Body | None = None) -> Body:
    """A chat response as an Anthropic ``message`` object (tool arguments parsed into ``input``)."""
    request = request or {}
    message, finish = _choice(chat)
    content: list[Body] = []
    text = _text_of(message.get("content"))
    if text:
        content.append({"type": "text", "text": text})
    calls = message.get("tool_calls") or []
    for j, call in enumerate(calls):
        fn = call.get("function") or {}
        args = _dumps(fn.get("arguments", "{}"))
        parsed = _loads_object(args)
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{j}", "name": fn.get("name", ""),
                        "input": parsed if parsed is not None else {"_unparsed_arguments": args}})
    stop_reason = "tool_use" if calls else "max_tokens" if finish == "length" else "end_turn"
    matched = (chat.get("choices") or [{}])[0].get("stop_reason")  # vLLM names the stop string it hit
    stop_sequence, wanted = None, request.get("stop_sequences") or []
    if stop_reason == "end_turn" and isinstance(matched, str) and matched in wanted:
        stop_reason, stop_sequence = "stop_sequence", matched
    inp, out = _usage(chat)
    return {
        "id": f"msg_{chat.get('id') or time.time_ns()}", "type": "message", "role": "assistant",
        "model": chat.get("model") or request.get("model") or "", "content": content,
        "stop_reason": stop_reason, "stop_sequence": stop_sequence,
        "usage": {"input_tokens": inp, "output_tokens": out},
    }
