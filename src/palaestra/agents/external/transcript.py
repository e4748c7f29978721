"""A CLI's conversation, rebuilt from the model calls it made.

An external CLI keeps its transcript in its own format (or not at all), but every call it made went
through our endpoint, in chat form. A coding agent resends its whole history on each call, so the
longest request plus the answer to it is the conversation; shorter calls beside it (titles, summaries,
token counts) are side calls, counted but not merged.
"""

from __future__ import annotations

from typing import Any

from palaestra.core.records import Message, ModelCallRecord


def response_message(call: ModelCallRecord) -> Message | None:
    """The assistant message of a successful chat response, in the shape agents append to history."""
    if call.response is None:
        return None
    try:
        msg = call.response["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(msg, dict):
        return None
    out: Message = {"role": "assistant", "content": msg.get("content")}
    if msg.get("tool_calls"):
        out["tool_calls"] = msg["tool_calls"]
    return out


def main_thread(calls: list[ModelCallRecord]) -> ModelCallRecord | None:
    """The call that carries the conversation: most request messages, the latest among equals."""
    best: ModelCallRecord | None = None
    for call in calls:
        if call.response is None:
            continue
        if best is None or len(call.request.get("messages") or []) >= len(best.request.get("messages") or []):
            best = call
    return best


def rebuild_messages(calls: list[ModelCallRecord]) -> tuple[list[Message], str | None]:
    """(messages, final answer): the main thread's request history plus its last answer. The final
    answer is that answer's text when it made no tool calls (the CLI stopped there)."""
    last = main_thread(calls)
    if last is None:
        return [], None
    messages: list[Message] = [dict(m) for m in last.request.get("messages") or []]
    answer = response_message(last)
    final: str | None = None
    if answer is not None:
        messages.append(answer)
        if not answer.get("tool_calls"):
            final = _text(answer.get("content"))
    return messages, final


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")
