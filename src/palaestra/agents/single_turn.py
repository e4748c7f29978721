"""The single-turn harness: one model call, no tools offered; its text is the final answer.
The cheapest harness for question-answer environments (mcqa, math), and a baseline for tool agents."""

from __future__ import annotations

from typing import Any

from palaestra.agents.base import ChatModel, ToolSurface
from palaestra.agents.tool_agent import first_message
from palaestra.core.records import Task, Trajectory
from palaestra.wire.env import SessionHandle


class SingleTurnAgent:
    name = "single"

    def __init__(self, max_steps: int = 1) -> None:
        self.max_steps = max_steps

    async def run(self, task: Task, session: SessionHandle, tools: ToolSurface, model: ChatModel,
                  sampling: dict[str, Any]) -> Trajectory:
        messages = list(session.messages)
        msg = first_message(await model.chat({"messages": list(messages), **sampling}))
        content = msg.get("content") or ""
        messages.append({"role": "assistant", "content": content})
        return Trajectory(messages=messages, final_answer=content, steps=1, stop_reason="final")
