"""A v1 taskset with a tool server (a ``vf.Toolset`` whose ``@vf.tool`` methods keep per-rollout state),
a reward that reads the tool calls off the trace, and a turn limit set on the environment's agent."""

from __future__ import annotations

import verifiers.v1 as vf


class CounterState(vf.State):
    adds: int = 0


class Calc(vf.Toolset[vf.ToolsetConfig, CounterState]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers."""
        self.state.adds += 1
        return a + b

    @vf.tool
    def adds_so_far(self) -> int:
        """How many additions this rollout made."""
        return self.state.adds


class AddData(vf.TaskData):
    answer: str
    a: int
    b: int


class AddTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class AddTask(vf.Task[AddData, vf.State, AddTaskConfig]):
    @classmethod
    def toolsets(cls, config: AddTaskConfig) -> list[vf.Toolset]:
        return [Calc(config.tools)]

    @vf.reward(weight=0.5)
    async def correct(self, trace: vf.Trace) -> float:
        return 1.0 if self.data.answer in trace.last_reply else 0.0

    @vf.reward(weight=0.5)
    async def used_add(self, trace: vf.Trace) -> float:
        calls = [c.name for m in trace.assistant_messages for c in (m.tool_calls or [])]
        return 1.0 if "calc_add" in calls else 0.0


class AddConfig(vf.TasksetConfig):
    task: AddTaskConfig = AddTaskConfig()


class AddTaskset(vf.Taskset[AddTask, AddConfig]):
    def load(self) -> list[AddTask]:
        return [AddTask(AddData(prompt=f"Use the calc_add tool to compute {a} + {b}.", answer=str(a + b), a=a, b=b),
                        self.config.task) for a, b in ((17, 25), (3, 4), (100, -1))]


__all__ = ["AddTaskset"]
