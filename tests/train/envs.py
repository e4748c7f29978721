"""Small environments for the training tests."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from palaestra import Environment, Reference, Task, ToolCall, Trajectory, Verdict, tool


class Tally(Environment):
    """A running total: a short tool list keeps the local model's prompt small."""

    name = "tally"
    mechanism = "stateful"

    def seed(self, task: Task) -> dict[str, int]:
        return {"total": 0}

    @tool
    def add(self, state: dict[str, int], n: int) -> str:
        """Add n to the total.

        Args:
            n: the number to add
        """
        state["total"] += n
        return f"total is {state['total']}"

    @tool
    def total(self, state: dict[str, int]) -> dict[str, int]:
        """Read the total."""
        return {"total": state["total"]}

    def verify(self, state: dict[str, int], trajectory: Trajectory) -> Verdict:
        return Verdict(reward=float(str(state["total"]) in (trajectory.final_answer or "")))


class Slowpoke(Environment):
    """One tool, ``work``; the members listed in ``metadata.slow_members`` (by the order their sessions
    open for the task) take ``metadata.slow_s`` seconds in it: deterministic stragglers."""

    name = "slowpoke"
    mechanism = "stateful"
    opened: collections.Counter[str] = collections.Counter()

    def seed(self, task: Task) -> dict[str, Any]:
        ordinal = Slowpoke.opened[task.id]
        Slowpoke.opened[task.id] += 1
        slow = ordinal in task.metadata.get("slow_members", [])
        return {"delay": float(task.metadata.get("slow_s", 0.0)) if slow else 0.0, "worked": False}

    @tool
    async def work(self, state: dict[str, Any]) -> str:
        """Do the work."""
        await asyncio.sleep(state["delay"])
        state["worked"] = True
        return "worked"

    def verify(self, state: dict[str, Any], trajectory: Trajectory) -> Verdict:
        return Verdict(reward=float(state["worked"] and trajectory.final_answer == "done"))

    def reference(self, task: Task) -> Reference:
        return Reference(tool_calls=[ToolCall(name="work")], final_answer="done")

    def examples(self) -> list[Task]:
        return []
