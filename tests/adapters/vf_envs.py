"""Two small environments written with the verifiers library's own API (a dataset, a rubric of reward
functions, a ToolEnv's Python tools), and the Palaestra adapters over them. No hub downloads."""

from __future__ import annotations

from typing import Any

import datasets
import verifiers as vf
from datasets import Dataset

from palaestra.adapters.verifiers import VerifiersEnvironment
from palaestra.core.records import Reference, Task, ToolCall

datasets.disable_progress_bars()

ARITH = [("What is 2 + 3?", "5"), ("What is 7 * 6?", "42"), ("What is 10 - 4?", "6")]


def load_arith(system_prompt: str = "Answer with the number only.") -> Any:
    parser = vf.Parser()

    def exact_answer(completion: Any, answer: str, **kwargs: Any) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    def short_answer(completion: Any, **kwargs: Any) -> float:
        return 1.0 if 0 < len((parser.parse_answer(completion) or "").strip()) <= 4 else 0.0

    data = Dataset.from_list([{"question": q, "answer": a} for q, a in ARITH])
    rubric = vf.Rubric(funcs=[exact_answer, short_answer], weights=[0.8, 0.2], parser=parser)
    return vf.SingleTurnEnv(eval_dataset=data, rubric=rubric, parser=parser, system_prompt=system_prompt)


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


def load_adder() -> Any:
    parser = vf.Parser()
    rows = [{"question": f"Use the add tool to compute {a} + {b}.", "answer": str(a + b), "info": {"a": a, "b": b}}
            for a, b in ((17, 25), (3, 4), (100, -1))]

    def correct(completion: Any, answer: str, **kwargs: Any) -> float:
        return 1.0 if answer in (parser.parse_answer(completion) or "") else 0.0

    def used_add(completion: Any, **kwargs: Any) -> float:
        calls = [tc.name for m in completion if getattr(m, "role", None) == "assistant" for tc in (m.tool_calls or [])]
        return 1.0 if "add" in calls else 0.0

    rubric = vf.Rubric(funcs=[correct, used_add], weights=[0.5, 0.5], parser=parser)
    return vf.ToolEnv(eval_dataset=Dataset.from_list(rows), tools=[add], rubric=rubric, parser=parser, max_turns=4)


class VfArith(VerifiersEnvironment):
    name = "vf-arith"
    verifiers_env = "vf_envs:load_arith"
    verifiers_args = {"system_prompt": "Reply with just the number."}


class VfAdder(VerifiersEnvironment):
    name = "vf-adder"
    mechanism = "multi-turn"
    verifiers_env = "vf_envs:load_adder"

    def reference(self, task: Task) -> Reference:
        info = task.metadata["vf_row"]["info"]
        return Reference(tool_calls=[ToolCall(name="add", arguments={"a": info["a"], "b": info["b"]})],
                         final_answer=str(task.metadata["answer"]))


# ---- published environments' shapes ----------------------------------------------------------------
# verifiers' own reasoning-gym integration (verifiers.envs.integrations.reasoninggym_env): its answer
# column holds the row's index into the reasoning-gym dataset, the true answer lives in that dataset.
def load_rg_env() -> Any:
    from verifiers.envs.integrations.reasoninggym_env import ReasoningGymEnv

    return ReasoningGymEnv(gym="basic_arithmetic", num_train_examples=2, num_eval_examples=4, seed=3)


class VfReasoningGym(VerifiersEnvironment):
    name = "vf-rg"
    verifiers_env = "vf_envs:load_rg_env"


def tool_a(x: int) -> int:
    """Add 1 to an integer.

    Args:
        x: The integer.
    """
    return x + 1


def tool_b(x: str) -> str:
    """Append "2" to a string.

    Args:
        x: The string.
    """
    return x + "2"


def load_tool_test() -> Any:
    """The shape of verifiers' ``tool_test`` environment: one model turn (``max_turns=1``) that must call
    exactly the listed tools, read off the completion's last message as verifiers leaves it."""
    rows = [{"prompt": [{"role": "user", "content": f"Call these tools with arguments of your choice: {names}"}],
             "info": {"tool_names": names}} for names in (["tool_a"], ["tool_a", "tool_b"], ["tool_b"])]

    def called_exactly(completion: Any, info: dict[str, Any]) -> float:
        last = completion[-1]
        calls = (last.tool_calls or []) if last.role == "assistant" else []
        return 1.0 if sorted(c.name for c in calls) == sorted(info["tool_names"]) else 0.0

    return vf.ToolEnv(eval_dataset=Dataset.from_list(rows), tools=[tool_a, tool_b],
                      rubric=vf.Rubric(funcs=[called_exactly]), max_turns=1)


class VfToolTest(VerifiersEnvironment):
    name = "vf-tool-test"
    mechanism = "multi-turn"
    verifiers_env = "vf_envs:load_tool_test"

    def reference(self, task: Task) -> Reference:
        """Every listed tool called in the one turn verifiers scores (the row says which, not with what)."""
        args: dict[str, dict[str, Any]] = {"tool_a": {"x": 1}, "tool_b": {"x": "s"}}
        names = task.metadata["vf_row"]["info"]["tool_names"]
        return Reference(tool_calls=[ToolCall(name=n, arguments=args[n]) for n in names], parallel=True,
                         final_answer="done")
