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
