"""The tool-calling agent: model → tool calls → tool outputs → model, until a final answer, the step
limit or the rollout deadline. Tool errors and malformed calls become tool messages the model sees."""

from __future__ import annotations

from typing import Any

import orjson

from palaestra.agents.base import ChatModel, ToolSurface
from palaestra.core.errors import ModelError
from palaestra.core.records import Task, Trajectory
from palaestra.wire.env import SessionHandle, ToolResult

MAX_TOOL_OUTPUT_CHARS = 16_000


def render_tool_result(result: ToolResult, limit: int = MAX_TOOL_OUTPUT_CHARS) -> str:
    """Tool output as message text; errors are prefixed so the model can tell them apart."""
    if result.error:
        text = f"Error ({result.error.get('kind', 'error')}): {result.error.get('message', '')}"
        if result.error.get("hint"):
            text += f"\nHint: {result.error['hint']}"
    elif isinstance(result.output, str):
        text = result.output
    else:
        text = orjson.dumps(result.output).decode()
    if len(text) > limit:
        text = text[:limit] + f"\n[... truncated {len(text) - limit} characters]"
    return text


class ToolAgent:
    """A plain tool-calling loop; parallel tool calls in one turn run in the order the model gave them
    (deterministic for stateful environments and for re-verification by replay)."""

    name = "tool"

    def __init__(self, max_steps: int = 16) -> None:
        self.max_steps = max_steps

    async def run(self, task: Task, session: SessionHandle, tools: ToolSurface, model: ChatModel,
                  sampling: dict[str, Any]) -> Trajectory:
        traj = Trajectory(messages=list(session.messages))
        messages = traj.messages
        for step in range(self.max_steps):
            body: dict[str, Any] = {"messages": list(messages), **sampling}
            if tools.schemas:
                body["tools"] = tools.schemas
            resp = await model.chat(body)
            msg = first_message(resp)
            traj.steps = step + 1
            calls = msg.get("tool_calls") or []
            if not isinstance(calls, list):
                raise ModelError(f"model response choices[0].message.tool_calls is not a list: {str(calls)[:200]}")
            content = content_text(msg.get("content"))
            assistant: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
            if calls:
                assistant["tool_calls"] = calls
            messages.append(assistant)
            if not calls:
                traj.final_answer = content
                traj.stop_reason = "final"
                break
            for i, call in enumerate(calls):
                call_id, name, args = _unpack_call(call, step, i)
                if name is None:
                    traj.parse_failures += 1
                    result = ToolResult(error={"kind": "bad_call", "message": "tool call without a function name"})
                else:
                    if isinstance(args, str) and not _is_json_object(args):
                        traj.parse_failures += 1
                    result = await tools.call(name, args, call_id)
                messages.append({"role": "tool", "tool_call_id": call_id, "content": render_tool_result(result)})
        else:
            traj.stop_reason = "max_steps"
        traj.tool_calls = tools.records
        return traj


def first_message(resp: dict[str, Any]) -> dict[str, Any]:
    try:
        msg = resp["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        raise ModelError(f"model response has no choices[0].message: {str(resp)[:200]}") from None
    if not isinstance(msg, dict):
        raise ModelError(f"model response message is not an object: {str(msg)[:200]}")
    return msg


def _unpack_call(call: Any, step: int, index: int) -> tuple[str, str | None, Any]:
    if not isinstance(call, dict):
        return f"call_{step}_{index}", None, None
    fn = call.get("function") or {}
    call_id = str(call.get("id") or f"call_{step}_{index}")
    name = fn.get("name") if isinstance(fn, dict) else None
    name = name if isinstance(name, str) else None  # a non-string name is a bad call, answered as such
    args = fn.get("arguments", "{}") if isinstance(fn, dict) else "{}"
    if args is None:
        args = "{}"
    return call_id, name, args


def content_text(content: Any) -> str:
    """Message content as text: OpenAI content parts are joined; any other non-string is written out."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(orjson.loads(text), dict) if text.strip() else True
    except orjson.JSONDecodeError:
        return False
