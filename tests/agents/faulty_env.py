"""A test environment whose one tool fails as infrastructure (``EnvironmentFailure``): the oracle calls
it, so a rollout meets an environment failure inside the agent loop, whichever harness runs it and
wherever that harness runs."""

from __future__ import annotations

from typing import Any

from palaestra import Environment, Task, Trajectory, Verdict, tool
from palaestra.core.errors import EnvironmentFailure
from palaestra.core.records import Reference, ToolCall


class FaultyEnv(Environment):
    name = "faulty"

    def seed(self, task: Task) -> dict[str, Any]:
        return {}

    @tool
    def explode(self, state: dict[str, Any]) -> str:
        """Reach the backing store (which is down)."""
        raise EnvironmentFailure("the faulty environment's backing store is down")

    def reference(self, task: Task) -> Reference | None:
        return Reference(tool_calls=[ToolCall(name="explode", arguments={})], final_answer="done")

    def verify(self, state: dict[str, Any], trajectory: Trajectory) -> Verdict:
        return Verdict(reward=1.0, passed=True)
