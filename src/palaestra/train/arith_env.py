"""``arith``: short additions with a reward a 135M model can learn on a CPU in minutes.

The GRPO example's environment. Half of the reward is the answer format (the reply is the bare number,
as asked), half is the sum being right, so a group of samples nearly always differs in reward (GRPO
learns nothing from a group whose rewards are equal). Tasks are generated from a seed; ``split`` keeps the
held-out operand pairs disjoint from the training ones, so an improvement on them is not memorisation.
The prompt shows one solved example first: without it a small model almost never answers in the format
and there is no signal to learn from.
"""

from __future__ import annotations

import random
import re
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Reference, Task, ToolCall, Trajectory, Verdict
from palaestra.core.tools import tool

QUESTION = "What is {a} + {b}? Reply with the number only."
SHOT = ({"role": "user", "content": QUESTION.format(a=2, b=5)}, {"role": "assistant", "content": "7"})
_BARE = re.compile(r"-?\d+\.?")
_NUMBER = re.compile(r"-?\d+")


def _held_out(a: int, b: int) -> bool:
    """A fixed quarter of the operand pairs, never used for training."""
    return (a * 7 + b * 3) % 4 == 0


def make_tasks(n: int, *, split: str = "train", seed: int = 0, lo: int = 1, hi: int = 9) -> list[Task]:
    """``n`` tasks of the ``train`` or ``heldout`` split (pairs may repeat when ``n`` exceeds them)."""
    if split not in ("train", "heldout"):
        raise ValueError(f"unknown split {split!r}: use train or heldout")
    pairs = [(a, b) for a in range(lo, hi + 1) for b in range(lo, hi + 1) if _held_out(a, b) == (split == "heldout")]
    rng = random.Random(f"{split}:{seed}")
    rng.shuffle(pairs)
    return [Task(id=f"{split}-{i}-{a}+{b}", env="arith", input=QUESTION.format(a=a, b=b),
                 metadata={"a": a, "b": b, "answer": a + b}) for i, (a, b) in
            ((i, pairs[i % len(pairs)]) for i in range(n))]


def score(reply: str, answer: int) -> tuple[float, float]:
    """(format, correct): the reply is a bare number; the first number in it is the sum."""
    text = reply.strip()
    numbers = _NUMBER.findall(text)
    return float(bool(_BARE.fullmatch(text))), float(bool(numbers) and int(numbers[0]) == answer)


class Arith(Environment):
    """Add two small numbers; reward 0.5 for answering with the bare number and 0.5 for the right sum."""

    name = "arith"
    version = "0.1"
    description = "Add two small numbers and reply with the number only (format + correctness reward)."
    domain = "math"
    mechanism = "single-turn"

    def check_task(self, task: Task) -> None:
        if not isinstance(task.metadata.get("answer"), int):
            raise InvalidTask(f"arith task '{task.id}' has no integer metadata.answer",
                              hint="generate tasks with palaestra.train.arith_env.make_tasks")

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        return [dict(m) for m in SHOT] + task.messages()

    def examples(self) -> list[Task]:
        return make_tasks(24, split="train")

    def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        answer = int(state.metadata["answer"])
        reply = trajectory.final_text()
        fmt, correct = score(reply, answer)
        return Verdict(reward=0.5 * fmt + 0.5 * correct, passed=bool(fmt and correct),
                       components={"format": fmt, "correct": correct}, answer=reply.strip()[:32])

    def reference(self, task: Task) -> Reference:
        return Reference(final_answer=str(task.metadata["answer"]))


TOOL_QUESTION = "What is {a} + {b}? Call the add tool, then reply with the number only."


def make_tool_tasks(n: int, *, split: str = "train", seed: int = 0) -> list[Task]:
    """``make_tasks`` for ``arith_tools``: the same operand pairs, asking for the tool first."""
    return [t.model_copy(update={"env": "arith_tools", "input": TOOL_QUESTION.format(**t.metadata)})
            for t in make_tasks(n, split=split, seed=seed)]


class ArithTools(Arith):
    """``arith`` as a two-turn tool task: the model calls ``add`` and then answers. The reward is
    ``arith``'s (format + correct, on the final reply), so a trainer learns to read the tool's result back
    in the asked form; ``used_tool`` is reported as a component but not rewarded."""

    name = "arith_tools"
    description = "Add two small numbers with the add tool, then reply with the number only."
    mechanism = "stateful"

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        return task.messages()

    def seed(self, task: Task) -> dict[str, Any]:
        return {"task": task, "calls": 0}

    @tool
    def add(self, state: dict[str, Any], a: int, b: int) -> str:
        """Add two integers.

        Args:
            a: the first number
            b: the second number
        """
        state["calls"] += 1
        return str(a + b)

    def examples(self) -> list[Task]:
        return make_tool_tasks(24, split="train")

    def verify(self, state: Any, trajectory: Trajectory) -> Verdict:
        verdict = super().verify(state["task"], trajectory)
        verdict.components["used_tool"] = float(state["calls"] > 0)
        return verdict

    def reference(self, task: Task) -> Reference:
        m = task.metadata
        return Reference(tool_calls=[ToolCall(name="add", arguments={"a": m["a"], "b": m["b"]})],
                         final_answer=str(m["answer"]))
