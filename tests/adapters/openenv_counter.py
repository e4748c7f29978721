"""A small OpenEnv environment written with OpenEnv's own API (Action, Observation, Environment,
create_app), plus the Palaestra adapters over it: one attached to its server, one in-process.

The game: a counter starts at ``start``; each action adds ``delta`` (|delta| <= 5). Reaching ``target``
gives reward 1.0 and ends the episode; every other step gives 0."""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from palaestra.adapters.openenv import OpenEnvEnvironment
from palaestra.core.records import Task


class CounterAction(Action):
    delta: int = Field(..., ge=-5, le=5, description="How much to add to the counter")


class CounterObservation(Observation):
    value: int = 0
    target: int = 0


class CounterEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self.value = self.target = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CounterObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        self.value, self.target = int(kwargs.get("start", 0)), int(kwargs.get("target", 3))
        return CounterObservation(value=self.value, target=self.target, reward=0.0, done=False)

    def step(self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:  # type: ignore[override]
        self._state.step_count += 1
        self.value += action.delta
        hit = self.value == self.target
        return CounterObservation(value=self.value, target=self.target, reward=1.0 if hit else 0.0, done=hit)

    @property
    def state(self) -> State:
        return self._state


app = create_app(CounterEnvironment, CounterAction, CounterObservation, env_name="counter", max_concurrent_envs=64)


def _tasks(name: str) -> list[Task]:
    rows = [(0, 3), (2, -4), (-1, 9)]
    tasks = []
    for i, (start, target) in enumerate(rows):
        steps, left = [], target - start
        while left:
            d = max(-5, min(5, left))
            steps.append({"delta": d})
            left -= d
        tasks.append(Task(id=f"{name}-{i}", env=name, input=f"Bring the counter from {start} to {target}.",
                          metadata={"reset": {"start": start, "target": target}, "reference_actions": steps}))
    return tasks


class RemoteCounter(OpenEnvEnvironment):
    """Attached to a running OpenEnv server (its URL in PALAESTRA_TEST_OPENENV_URL)."""

    name = "openenv-counter"
    openenv_url_env = "PALAESTRA_TEST_OPENENV_URL"

    def examples(self) -> list[Task]:
        return _tasks(self.name)


class LocalCounter(OpenEnvEnvironment):
    """The same OpenEnv environment class, run in-process."""

    name = "openenv-counter-local"
    openenv_env = "openenv_counter:CounterEnvironment"
    openenv_action = "openenv_counter:CounterAction"

    def examples(self) -> list[Task]:
        return _tasks(self.name)
