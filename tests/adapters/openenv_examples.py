"""Two environments with the contracts of OpenEnv's own examples (its repository's ``envs/grid_world_env``
and ``envs/echo_env``, which are not in the ``openenv`` wheel), written here with OpenEnv's API and
served by OpenEnv's ``create_app``, plus the Palaestra adapters over them, in-process and remote.

- Grid world: a 5x5 grid, start at [0, 0], goal at [4, 4]. Like the upstream example, ``reset(self)``
  takes no ``seed``/``episode_id`` and ``step(self, action)`` no ``timeout_s``, and the reward is shaped:
  -0.1 for every move, 1.0 on reaching the goal (done). The optimal episode is 8 moves; its return is
  0.3, its final reward 1.0.
- Echo: an ``MCPEnvironment`` whose FastMCP server has the tools ``echo_message`` and
  ``echo_with_length``; like upstream, MCP calls give reward 0, so its Palaestra adapter grades the task
  (echo the requested text back) from the tool results.
"""

from __future__ import annotations

from typing import Any, Literal

from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from palaestra.adapters.openenv import OpenEnvEnvironment, OpenEnvState
from palaestra.core.records import Task, Trajectory, Verdict

MOVES = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}


class GridAction(Action):
    action: Literal["UP", "DOWN", "LEFT", "RIGHT"] = Field(..., description="Where to move")


class GridObservation(Observation):
    x: int = 0
    y: int = 0
    message: str = ""


class GridWorld(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    size, goal = 5, (4, 4)

    def __init__(self) -> None:
        super().__init__()
        self.pos = (0, 0)
        self._state = State(step_count=0)

    def reset(self) -> GridObservation:  # type: ignore[override]  # no seed, no episode_id: as upstream
        self.pos, self._state = (0, 0), State(step_count=0)
        return GridObservation(x=0, y=0, message=f"Reach {list(self.goal)}.", reward=0.0, done=False)

    def step(self, action: GridAction) -> GridObservation:  # type: ignore[override]  # no timeout_s
        self._state.step_count += 1
        dx, dy = MOVES[action.action]
        self.pos = (min(max(self.pos[0] + dx, 0), self.size - 1), min(max(self.pos[1] + dy, 0), self.size - 1))
        won = self.pos == self.goal
        return GridObservation(x=self.pos[0], y=self.pos[1], message="goal" if won else "keep going",
                               reward=1.0 if won else -0.1, done=won)

    @property
    def state(self) -> State:
        return self._state


class EchoMCP(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        server = FastMCP("echo")

        @server.tool
        def echo_message(message: str) -> str:
            """Return the message unchanged."""
            return message

        @server.tool
        def echo_with_length(message: str) -> dict[str, Any]:
            """Return the message and its length."""
            return {"message": message, "length": len(message)}

        super().__init__(server)
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        self._state = State(episode_id=episode_id, step_count=0)
        return Observation(done=False, reward=0.0, metadata={"ready": True})

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(done=False, reward=0.0, metadata={"error": f"unknown action {type(action).__name__}"})

    @property
    def state(self) -> State:
        return self._state


grid_app = create_app(GridWorld, GridAction, GridObservation, env_name="grid_world", max_concurrent_envs=64)
echo_app = create_app(EchoMCP, CallToolAction, CallToolObservation, env_name="echo", max_concurrent_envs=64)


def _grid_tasks(name: str) -> list[Task]:
    paths = [["DOWN"] * 4 + ["RIGHT"] * 4, ["RIGHT", "DOWN"] * 4, ["RIGHT"] * 4 + ["DOWN"] * 4]
    return [Task(id=f"{name}-{i}", env=name, input="Walk from [0, 0] to the goal at [4, 4].",
                 metadata={"reference_actions": [{"action": m} for m in path]}) for i, path in enumerate(paths)]


class LocalGrid(OpenEnvEnvironment):
    name = "openenv-grid-local"
    openenv_env = "openenv_examples:GridWorld"
    openenv_action = "openenv_examples:GridAction"

    def examples(self) -> list[Task]:
        return _grid_tasks(self.name)


class RemoteGrid(OpenEnvEnvironment):
    name = "openenv-grid"
    openenv_url_env = "PALAESTRA_TEST_OPENENV_GRID_URL"

    def examples(self) -> list[Task]:
        return _grid_tasks(self.name)


class _EchoTasks(OpenEnvEnvironment):
    """Echo gives no reward, so the wrapper grades: the last tool result must carry the requested text."""

    require_done = False

    def examples(self) -> list[Task]:
        rows = [("echo_message", "hello"), ("echo_with_length", "grid world"), ("echo_message", "ünïcode")]
        return [Task(id=f"{self.name}-{i}", env=self.name, input=f"Use {tool} to echo back: {text}",
                     metadata={"expected": text,
                               "reference_actions": [{"tool": tool, "arguments": {"message": text}}]})
                for i, (tool, text) in enumerate(rows)]

    def verify(self, state: OpenEnvState, trajectory: Trajectory) -> Verdict:
        from palaestra.adapters.openenv_tools import mcp_result

        expected = state.task.metadata["expected"]
        got = [mcp_result(o) for o in state.outcomes if not o.observation.get("error")]
        last = got[-1] if got else None
        echoed = last.get("message") if isinstance(last, dict) else last
        ok = echoed == expected
        return Verdict(reward=1.0 if ok else 0.0, passed=ok, metadata={"echoed": echoed, "calls": len(got)})


class LocalEcho(_EchoTasks):
    name = "openenv-echo-local"
    openenv_env = "openenv_examples:EchoMCP"
    openenv_action = "openenv.core.env_server.mcp_types:CallToolAction"


class RemoteEcho(_EchoTasks):
    name = "openenv-echo"
    openenv_url_env = "PALAESTRA_TEST_OPENENV_ECHO_URL"


class ProbeRaises(LocalGrid):
    """For env check's table: its grading probes raise (a bug in the environment, not in the check)."""

    name = "openenv-grid-probe-raises"

    def grading_probes(self, task: Task, workdir: Any) -> list[Any]:
        raise RuntimeError("probe factory broke")
