"""A taskset written with verifiers' v1 API (0.3's ``verifiers.v1``, the whole of 0.4): rows with an
``answer`` field, a weighted ``@vf.reward`` pair and a ``@vf.metric``. Loaded by its module id, as
verifiers loads a taskset package (``__all__`` exports the one Taskset)."""

from __future__ import annotations

import verifiers.v1 as vf

ROWS = [("What is 2 + 3?", "5"), ("What is 7 * 6?", "42"), ("What is 10 - 4?", "6")]


class ArithData(vf.TaskData):
    answer: str
    explode: bool = False


class ArithTask(vf.Task[ArithData]):
    @vf.reward(weight=0.8)
    async def exact(self, trace: vf.Trace) -> float:
        if self.data.explode:
            raise RuntimeError("the grader broke")
        return 1.0 if trace.last_reply == self.data.answer else 0.0

    @vf.reward(weight=0.2)
    async def short(self, trace: vf.Trace) -> float:
        return 1.0 if 0 < len(trace.last_reply) <= 4 else 0.0

    @vf.metric
    async def turns(self, trace: vf.Trace) -> float:
        return float(trace.num_turns)


class ArithConfig(vf.TasksetConfig):
    num_tasks: int = 3
    explode: bool = False  # every task's `exact` reward raises (a broken grader)


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    def load(self) -> list[ArithTask]:
        return [ArithTask(ArithData(prompt=q, answer=a, system_prompt="Reply with just the number.",
                                    explode=self.config.explode),
                          self.config.task) for q, a in ROWS[: self.config.num_tasks]]


__all__ = ["ArithTaskset"]
