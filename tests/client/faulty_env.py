"""An environment with one of every fault, for driving the same environment through every transport: a
row without a target is an invalid task, a row with ``boom`` makes the verifier raise, at most two live
sessions (a session limit that a test reaches in two calls), and ordinary tools for the verdicts."""

from __future__ import annotations

from dataclasses import dataclass

from palaestra import Environment, Reference, Task, ToolCall, ToolError, Trajectory, Verdict, tool
from palaestra.core.errors import InvalidTask


@dataclass
class State:
    value: int
    target: int
    boom: bool


class FaultyEnv(Environment):
    name = "faulty"
    mechanism = "stateful"
    max_sessions = 2

    def check_task(self, task: Task) -> None:
        if "target" not in task.metadata:
            raise InvalidTask(f"task {task.id} has no metadata.target", hint="add metadata.target")

    def seed(self, task: Task) -> State:
        return State(int(task.metadata.get("start", 0)), int(task.metadata["target"]),
                     bool(task.metadata.get("boom")))

    @tool
    def add(self, state: State, amount: int) -> str:
        """Add to the counter.

        Args:
            amount: how much to add (at most 100 in size)
        """
        if abs(amount) > 100:
            raise ToolError(f"amount {amount} is too large", hint="use at most 100 per call")
        state.value += amount
        return f"counter is now {state.value}"

    def verify(self, state: State, trajectory: Trajectory) -> Verdict:
        if state.boom:
            raise RuntimeError("the verifier has a bug")
        hit = state.value == state.target
        answered = (trajectory.final_answer or "").strip() == str(state.target)
        return Verdict(reward=0.5 * hit + 0.5 * answered, passed=hit and answered,
                       components={"state": float(hit), "answer": float(answered)},
                       answer=(trajectory.final_answer or "").strip() or None)

    def reference(self, task: Task) -> Reference:
        return Reference(tool_calls=[ToolCall(name="add", arguments={"amount": int(task.metadata["target"])})],
                         final_answer=str(task.metadata["target"]))
