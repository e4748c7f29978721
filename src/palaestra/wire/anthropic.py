"""The Anthropic Messages API dialect, both ways through chat: a Messages request from a harness (Claude
Code) as a chat request and the chat answer as a Messages ``message`` (the proxy's face), and a chat
request as a Messages request (for a backend that speaks Messages). Pure data shuffling; the shared pieces
are in ``translate.py``."""

from __future__ import annotations

import time
from typing import Any

from palaestra.wire.responses import responses_to_chat
from palaestra.wire.translate import (
    Body,
    TranslationError,
    _choice,
    _dumps,
    _loads_object,
    _pass,
    _text_of,
    _typed,
    _usage,
)


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


def _anthropic_blocks(message: Body) -> list[Body]:
    """One chat message's content as Anthropic content blocks (text, image, tool_use, tool_result)."""
    role, content = message["role"], message.get("content")
    if role == "tool":
        return [{"type": "tool_result", "tool_use_id": message.get("tool_call_id", ""), "content": _text_of(content)}]
    blocks: list[Body] = []
    if isinstance(content, str):
        if content:
            blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        for part in content:
            if part.get("type") == "text" and part.get("text"):
                blocks.append({"type": "text", "text": part["text"]})
            elif part.get("type") == "image_url":
                url = str((part.get("image_url") or {}).get("url", ""))
                if url.startswith("data:") and ";base64," in url:
                    media, _, data = url[5:].partition(";base64,")
                    blocks.append({"type": "image", "source": {"type": "base64", "media_type": media, "data": data}})
                else:
                    blocks.append({"type": "image", "source": {"type": "url", "url": url}})
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = _dumps(fn.get("arguments", "{}"))
        parsed = _loads_object(args)
        blocks.append({"type": "tool_use", "id": call.get("id", ""), "name": fn.get("name", ""),
                       "input": parsed if parsed is not None else {"_unparsed_arguments": args}})
    return blocks


@_typed
def chat_to_anthropic_request(chat: Body) -> Body:
    """A chat request as an Anthropic Messages request: system messages become ``system``, tool results
    user-turn ``tool_result`` blocks, calls ``tool_use`` blocks; consecutive turns of one role merge (the
    API wants them alternating). Reasoning on assistant turns is dropped: Anthropic accepts only the
    ``thinking`` blocks it signed itself. ``max_tokens`` passes when the request has it (the caller adds
    one otherwise: Anthropic requires it)."""
    system: list[str] = []
    turns: list[Body] = []
    for message in chat.get("messages") or []:
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(message.get("content")))
            continue
        anthropic_role = "assistant" if role == "assistant" else "user"
        blocks = _anthropic_blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == anthropic_role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": anthropic_role, "content": blocks})
    for turn in turns:  # a turn of one text block reads back as the plain string it was
        if len(turn["content"]) == 1 and turn["content"][0]["type"] == "text":
            turn["content"] = turn["content"][0]["text"]
    out: Body = {"messages": turns}
    if system:
        out["system"] = "\n\n".join(system)
    _pass(chat, out, "model", "max_tokens", "temperature", "top_p")
    if isinstance(chat.get("max_completion_tokens"), int) and "max_tokens" not in out:
        out["max_tokens"] = chat["max_completion_tokens"]
    if chat.get("stop"):
        out["stop_sequences"] = chat["stop"] if isinstance(chat["stop"], list) else [chat["stop"]]
    if tools := [t["function"] for t in chat.get("tools") or [] if isinstance(t.get("function"), dict)]:
        out["tools"] = [{"name": fn.get("name", ""), "description": fn.get("description") or "",
                         "input_schema": fn.get("parameters") or {"type": "object", "properties": {}}}
                        for fn in tools]
    choice = chat.get("tool_choice")
    anthropic_choice: Body | None = None
    if isinstance(choice, dict):
        anthropic_choice = {"type": "tool", "name": (choice.get("function") or {}).get("name", "")}
    elif choice in ("auto", "none"):
        anthropic_choice = {"type": choice}
    elif choice == "required":
        anthropic_choice = {"type": "any"}
    if chat.get("parallel_tool_calls") is False and out.get("tools"):
        anthropic_choice = {**(anthropic_choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if anthropic_choice is not None and out.get("tools"):
        out["tool_choice"] = anthropic_choice
    return out


def responses_to_messages(body: Body) -> Body:
    """A Responses API request as an Anthropic Messages request (through its exact chat form)."""
    return chat_to_anthropic_request(responses_to_chat(body))
