"""A journal record reduced to what a person reads when opening one rollout.

The journal keeps every model request whole (each repeats the conversation and the tool schemas), which
makes a record ten times bigger than what is worth showing. The detail keeps the transcript, tool calls
with arguments and outputs, per-call status and latency, timings, the verdict and the token view, and
clips any single text at ``max_chars`` so one runaway output cannot bloat a report. Everything stays data
(strings, numbers): the page renders it with ``textContent``, never as markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from palaestra.metrics.rows import as_map, is_map
from palaestra.report.page import dumps
from palaestra.report.tokens import token_view

__all__ = ["MAX_CHARS", "clip", "rollout_detail"]

MAX_CHARS = 20_000


def clip(text: str, max_chars: int = MAX_CHARS) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n… [{len(text) - max_chars} more characters not shown]"


def _text(value: Any, max_chars: int) -> str | None:
    """Any JSON value as display text: strings as they are, everything else as indented JSON."""
    if value is None or (type(value) is str and len(value) <= max_chars):
        return value
    if isinstance(value, str):
        return clip(value, max_chars)
    try:
        text = dumps(value, orjson.OPT_INDENT_2).decode()
    except TypeError:
        text = repr(value)
    return clip(text, max_chars)


def _content(content: Any, max_chars: int) -> str | None:
    """Message content: text parts joined; a non-text part shows as its type, e.g. ``[image_url]``."""
    if content is None or isinstance(content, str):
        return _text(content, max_chars)
    if isinstance(content, list):
        parts = []
        for part in content:
            if is_map(part) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif is_map(part):
                parts.append(f"[{part.get('type', 'part')}]")
            else:
                parts.append(str(part))
        return clip("\n".join(parts), max_chars)
    return _text(content, max_chars)


def _arguments(raw: Any, max_chars: int) -> str | None:
    """Tool-call arguments pretty-printed when they are JSON (a string of JSON included)."""
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return clip(raw, max_chars)
    return _text(raw, max_chars)


def _messages(messages: list[Any], max_chars: int) -> list[Any]:
    """The messages as the viewer shows them. One that is ``{"role", "content"}`` with a short text and is
    not a tool result (most messages; every one of a single-turn rollout) is shown as it is: the detail
    holds the message itself, not a copy (it is only read and encoded). The test is written out in the
    loop, not called per message: a call per message cost as much as the copies."""
    shown = list(messages)
    for i, m in enumerate(shown):
        if type(m) is dict and len(m) == 2:
            role, content = m.get("role"), m.get("content")
            if type(role) is str and role != "tool" and type(content) is str and len(content) <= max_chars:
                continue
        shown[i] = _message(m, max_chars)
    return shown


def _message(m: Any, max_chars: int) -> dict[str, Any]:
    if not is_map(m):
        return {"role": "?", "content": _text(m, max_chars)}
    role = str(m.get("role", "?"))
    content = m.get("content")
    # a tool result is often JSON text: indent it like the tool-call outputs
    text = _arguments(content, max_chars) if role == "tool" and isinstance(content, str) else \
        _content(content, max_chars)
    out: dict[str, Any] = {"role": role, "content": text}
    for key in ("name", "tool_call_id"):
        if m.get(key) is not None:
            out[key] = str(m[key])
    calls = m.get("tool_calls")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = []
        for c in calls:
            fn = c.get("function") if is_map(c) else None
            fn = fn if is_map(fn) else (c if is_map(c) else {})
            out["tool_calls"].append({"id": c.get("id") if is_map(c) else None,
                                      "name": str(fn.get("name", "?")),
                                      "arguments": _arguments(fn.get("arguments"), max_chars)})
    if m.get("reasoning_content"):
        out["reasoning"] = _content(m.get("reasoning_content"), max_chars)
    return out


def _tool_call(c: Any, t0: float, max_chars: int) -> dict[str, Any]:
    c = c if is_map(c) else {}
    started = c.get("started")
    return {"name": str(c.get("name", "?")), "call_id": c.get("call_id"),
            "arguments": _arguments(c.get("arguments"), max_chars),
            "output": _text(c.get("output"), max_chars), "error": _text(c.get("error"), max_chars),
            "status": c.get("status", "ok"), "duration_s": c.get("duration_s"),
            "t": (started - t0) if isinstance(started, (int, float)) and started and t0 else None}


def _finish_reason(response: Any) -> str | None:
    if is_map(response):
        choices = response.get("choices")
        if isinstance(choices, list) and choices and is_map(choices[0]):
            reason = choices[0].get("finish_reason")
            return str(reason) if reason is not None else None
        if response.get("stop_reason") is not None:  # Anthropic messages
            return str(response["stop_reason"])
    return None


_NOT_PARAMS = frozenset(("messages", "tools", "input", "system"))


def _model_call(c: Any, t0: float, max_chars: int) -> dict[str, Any]:
    c = c if is_map(c) else {}
    request = c.get("request")
    request = request if is_map(request) else {}
    params = {k: v for k, v in request.items() if k not in _NOT_PARAMS and isinstance(v, (str, int, float, bool))}
    started = c.get("started")
    return {"api": c.get("api"), "status": c.get("status"), "latency_s": c.get("latency_s"),
            "usage": c.get("usage") or {}, "error": _text(c.get("error"), max_chars),
            "finish_reason": _finish_reason(c.get("response")), "params": params,
            "t": (started - t0) if isinstance(started, (int, float)) and started and t0 else None}


def _tool_names(model_calls: list[Any]) -> list[str]:
    for c in model_calls:
        request = c.get("request") if is_map(c) else None
        tools = request.get("tools") if is_map(request) else None
        if isinstance(tools, list):
            names = []
            for t in tools:
                fn = t.get("function", t) if is_map(t) else {}
                if is_map(fn) and fn.get("name"):
                    names.append(str(fn["name"]))
            return names
    return []


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def rollout_detail(rec: Mapping[str, Any], seq: int, *, max_chars: int = MAX_CHARS) -> dict[str, Any]:
    """What the viewer shows for one rollout; tolerant of missing or odd fields."""
    traj = as_map(rec.get("trajectory"))
    model_calls = _list(traj.get("model_calls"))
    started_at = rec.get("started_at")
    t0 = float(started_at) if isinstance(started_at, (int, float)) else 0.0
    verdict = rec.get("verdict") if is_map(rec.get("verdict")) else None
    outcome = as_map(rec.get("outcome"))
    messages, tool_calls = _list(traj.get("messages")), _list(traj.get("tool_calls"))
    get = rec.get
    return {
        "seq": seq, "rollout_id": get("rollout_id"), "task_id": get("task_id"), "env": get("env"),
        "agent": get("agent"), "model": get("model"), "repeat": get("repeat"), "attempt": get("attempt"),
        "started_at": get("started_at"), "tags": get("tags"),
        "outcome": {"status": outcome.get("status"), "kind": outcome.get("kind"),
                    "message": _text(outcome.get("message"), max_chars)},
        "verdict": None if verdict is None else {
            "reward": verdict.get("reward"), "passed": verdict.get("passed"),
            "components": verdict.get("components") or {}, "answer": _text(verdict.get("answer"), max_chars),
            "metadata": _text(verdict.get("metadata") or None, max_chars)},
        "timings": rec.get("timings") or {},
        "usage": rec.get("usage") or {},
        "messages": _messages(messages, max_chars),
        "tool_calls": [_tool_call(c, t0, max_chars) for c in tool_calls] if tool_calls else [],
        "model_calls": [_model_call(c, t0, max_chars) for c in model_calls],
        "tools": _tool_names(model_calls),
        "final_answer": _text(traj.get("final_answer"), max_chars),
        "steps": traj.get("steps"),
        "stop_reason": traj.get("stop_reason"),
        "parse_failures": traj.get("parse_failures"),
        "tokens": token_view(model_calls),
    }
