"""A Palaestra environment as a SkyRL-gym environment (``skyrl-gym`` 0.4, ``pip install 'palaestra[skyrl]'``).

SkyRL's generator owns the loop: it renders the conversation with the trainer's chat template, samples a
reply and hands the text to ``env.step(action)``; the environment answers observations (messages appended
to the conversation), a reward and ``done``. ``PalaestraTextEnv`` is that ``BaseTextEnv`` over one
Palaestra session:

- ``init(prompt)`` opens a session for the row's task and returns the environment's own first messages,
  with the session's tools described in the system message in the Hermes ``<tool_call>`` convention (the
  one Palaestra's local model uses), since SkyRL's template call passes no ``tools``;
- ``step(action)`` parses ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks from the
  reply and runs them in the session (observations: ``<tool_response>`` messages, reward 0, not done); a
  reply without a call (or the ``max_turns``-th reply) ends the episode: the environment's verifier
  scores the whole trajectory and that verdict's reward is the step's reward (``metadata["verdict"]``
  carries the rest);
- an infrastructure failure (environment, sandbox, verifier) raises instead of reading as a reward of 0.

Rows: ``dataset_rows(tasks)`` gives SkyRL's dataset format (``prompt``, ``env_class``; the other columns
reach the environment as ``extras``: ``task`` is the Palaestra task). ``register_env()`` makes
``skyrl_gym.make("palaestra", env_config=..., extras=row)`` build it; ``env_config`` may name
``placement`` (``direct`` by default; ``inprocess`` or ``local`` for a server process), ``max_turns`` and
``observation_role`` (``user`` like SkyRL's own environments, or ``tool``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import register as skyrl_register
from skyrl_gym.envs.registration import registry

from palaestra.core.errors import ConfigError
from palaestra.core.records import Task
from palaestra.integrations.episodes import Episode, SyncEpisodes
from palaestra.models.local import toolcalls

ENV_ID = "palaestra"
ENTRY_POINT = "palaestra.integrations.skyrl:PalaestraTextEnv"
DEFAULT_MAX_TURNS = 8
_EPISODES = SyncEpisodes()  # one loop thread and one mount per environment, shared by every episode


def _option(config: Any, key: str, default: Any) -> Any:
    """A key of SkyRL's ``env_config`` (an omegaconf ``DictConfig``, a dict, or None)."""
    if config is None:
        return default
    getter = getattr(config, "get", None)
    value = getter(key, None) if callable(getter) else getattr(config, key, None)
    return default if value is None else value


def register_env(env_id: str = ENV_ID) -> str:
    """Register ``PalaestraTextEnv`` with skyrl-gym under ``env_id`` (once; later calls are no-ops)."""
    if env_id not in registry:
        skyrl_register(id=env_id, entry_point=ENTRY_POINT)
    return env_id


def dataset_rows(tasks: Iterable[Task], *, env_class: str = ENV_ID, max_turns: int | None = None
                 ) -> list[dict[str, Any]]:
    """SkyRL dataset rows for Palaestra tasks: ``prompt`` (the task's messages; ``init`` replaces them with
    the environment's own), ``env_class``, and ``task`` (what ``PalaestraTextEnv`` opens its session with)."""
    rows = []
    for task in tasks:
        row: dict[str, Any] = {"prompt": task.messages(), "env_class": env_class,
                               "task": task.model_dump(mode="json", exclude_none=True)}
        if max_turns is not None:
            row["max_turns"] = max_turns
        rows.append(row)
    return rows


class PalaestraTextEnv(BaseTextEnv):
    """One Palaestra session as a SkyRL-gym ``BaseTextEnv`` (see the module docstring)."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        extras = dict(extras or {})
        raw = extras.get("task")
        if not isinstance(raw, dict):
            raise ConfigError("a Palaestra SkyRL row needs its task in the 'task' column",
                              hint="build the rows with palaestra.integrations.skyrl.dataset_rows(tasks)")
        self.task = Task.model_validate(raw)
        self.env_spec = str(_option(env_config, "env", None) or self.task.env)
        if not self.env_spec:
            raise ConfigError(f"task {self.task.id!r} names no environment", hint="set the task's env field")
        self.placement = str(_option(env_config, "placement", "direct"))
        self.max_turns = int(extras.get("max_turns") or _option(env_config, "max_turns", DEFAULT_MAX_TURNS))
        self.observation_role = str(_option(env_config, "observation_role", "user"))
        self.episode: Episode | None = None
        self.tool_calls = 0

    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Open the session; the first messages are the environment's, tools described in the system one."""
        self.episode = _EPISODES.run(_EPISODES.mounts.open(self.env_spec, self.task, self.placement))
        messages = [dict(m) for m in self.episode.messages]
        if self.episode.tools:
            described = toolcalls.system_prompt(self.episode.tools)
            if messages and messages[0].get("role") == "system":
                messages[0]["content"] = f"{messages[0].get('content') or ''}\n\n{described}"
            else:
                messages.insert(0, {"role": "system", "content": described})
        return messages, {"task_id": self.task.id, "tools": [t.get("function", t).get("name")
                                                             for t in self.episode.tools]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.episode is None:
            raise RuntimeError("step() before init(): SkyRL calls init(prompt) first")
        self.turns += 1
        episode = self.episode
        content, calls, failures = toolcalls.parse(action, episode.tools, f"{self.task.id}:{self.turns}")
        episode.parse_failures += failures
        episode.add_assistant(content, calls)
        if calls and self.turns < self.max_turns:
            observations = []
            for call in calls:
                fn = call["function"]
                text = _EPISODES.run(episode.call(fn["name"], fn["arguments"], call["id"]))
                observations.append({"role": self.observation_role,
                                     "content": f"<tool_response>\n{text}\n</tool_response>"})
            self.tool_calls += len(calls)
            return BaseTextEnvStepOutput(observations=observations, reward=0.0, done=False,
                                         metadata={"tool_calls": [c["function"]["name"] for c in calls]})
        stop = "max_steps" if calls else "final"
        verdict = _EPISODES.run(episode.finish(None if calls else (content or ""), stop_reason=stop,
                                               steps=self.turns))
        return BaseTextEnvStepOutput(observations=[], reward=float(verdict.reward), done=True,
                                     metadata={"verdict": verdict.model_dump(mode="json"), "stop_reason": stop})

    def get_metrics(self) -> dict[str, Any]:
        verdict = self.episode.verdict if self.episode is not None else None
        metrics: dict[str, Any] = {"turns": self.turns, "tool_calls": self.tool_calls}
        if verdict is not None:
            metrics["palaestra_reward"] = verdict.reward
            metrics["passed"] = float(verdict.is_pass())
        return metrics

    def close(self) -> None:
        """Close the session if the episode did not end (an aborted trajectory): nothing is verified."""
        if self.episode is not None and self.episode.verdict is None:
            _EPISODES.run(self.episode.close())


def close_all() -> None:
    """Stop the mounted environments and their loop thread (a trainer's shutdown; tests)."""
    _EPISODES.close()
