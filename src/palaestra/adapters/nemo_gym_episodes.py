"""NeMo Gym servers whose episode the server itself drives: ``/seed_session`` answers the prompt and tools.

Most NeMo Gym rows carry their prompt (``responses_create_params.input``) and NeMo Gym's simple agent
sends it. A few servers build the episode themselves and ship rows with an empty input: their agent
(``toolsandbox_agent``, ``aviary_agent``) posts ``/seed_session`` (``{"task_idx": ...}``), which answers an
``env_id``, the observations to start from (``obs``: messages) and the tools; every model turn then goes to
``POST /step`` (``{"env_id", "function_calls": [...], "text"}``: tool calls, or the model's text for the
server's user simulator), which answers new observations and ``done``; ``POST /close`` scores the episode
and ``/verify`` reports that score for the ``env_id`` of its ``response``.

``nemo_gym_server`` drives such a server the same way: the seed's observations are the prompt, its tools
the tools, each tool call one ``/step``, and the model's final text one last ``/step`` before ``/close``
and ``/verify``. One difference is kept and said: NeMo Gym's agent goes on after a text turn while the
server's user simulator answers and the episode is not done; Palaestra's agents end a rollout at a text
reply, so the episode is scored as it stands after that reply's step.

Nothing here imports NeMo Gym: the protocol is read from the JSON alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

# The NeMo Gym agents that build the episode from /seed_session (so an empty row input is expected).
OBSERVING_AGENTS = frozenset({"toolsandbox_agent", "aviary_agent"})


@dataclass
class Episode:
    """What a seed of such a server answered: the episode's id, its first observations, its tools."""

    env_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    done: bool = False
    closed: bool = False
    calls: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)  # every /step answer, for the verdict


def _message(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict) or not isinstance(item.get("role"), str):
        return None
    content = item.get("content")
    if isinstance(content, list):  # input_text parts → their text
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return {"role": item["role"], "content": content if isinstance(content, str) else ""}


def _chat_tool(tool: Any) -> dict[str, Any] | None:
    """A Responses flat function tool (``{"type": "function", "name", "parameters"}``) in chat form."""
    if not isinstance(tool, dict):
        return None
    inner = tool.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else tool
    if not isinstance(fn.get("name"), str):
        return None
    spec: dict[str, Any] = {"name": fn["name"],
                            "parameters": fn.get("parameters") or {"type": "object", "properties": {}}}
    if isinstance(fn.get("description"), str):
        spec["description"] = fn["description"]
    return {"type": "function", "function": spec}


def episode(seeded: Any) -> Episode | None:
    """The episode a ``/seed_session`` answer opens, or None for a plain seed (no ``env_id`` and ``obs``)."""
    if not isinstance(seeded, dict) or not isinstance(seeded.get("env_id"), str):
        return None
    obs = seeded.get("obs")
    if not isinstance(obs, list):
        return None
    messages = [m for m in (_message(o) for o in obs) if m is not None]
    tools = [t for t in (_chat_tool(x) for x in seeded.get("tools") or []) if t is not None]
    return Episode(seeded["env_id"], messages, tools)


def call_step(ep: Episode, name: str, arguments: Any) -> dict[str, Any]:
    """The ``/step`` body of one tool call (a Responses ``function_call`` item)."""
    ep.calls += 1
    call_id = f"call_palaestra_{ep.calls}"
    return {"env_id": ep.env_id, "text": None,
            "function_calls": [{"type": "function_call", "call_id": call_id, "id": call_id, "name": name,
                                "arguments": orjson.dumps(arguments or {}).decode(), "status": "completed"}]}


def text_step(ep: Episode, text: str) -> dict[str, Any]:
    """The ``/step`` body of the model's text turn (what the server's user simulator reads)."""
    return {"env_id": ep.env_id, "function_calls": [], "text": text}


def observe(ep: Episode, answer: Any) -> str:
    """Record one ``/step`` answer; the tool's output as the model reads it (outputs, then messages)."""
    if not isinstance(answer, dict):
        return ""
    ep.steps.append({k: answer.get(k) for k in ("reward", "done")})
    ep.done = bool(answer.get("done"))
    parts: list[str] = []
    for item in answer.get("obs") or []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            parts.append(str(item.get("output", "")))
        elif (msg := _message(item)) is not None and msg["content"]:
            parts.append(f"[{msg['role']}] {msg['content']}")
    return "\n".join(parts)


def verify_fields(ep: Episode, group: str) -> dict[str, Any]:
    """What NeMo Gym's observing agents add to the ``response`` they verify (its episode's coordinates)."""
    return {"env_id": ep.env_id, "group_id": group, "contains_transitions": False}
