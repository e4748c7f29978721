"""A Palaestra environment driven through skyrl-gym's own API (``skyrl_gym.make``, ``init``, ``step``).

The environment is ``workplace`` (stateful, 13 tools, SQLite per session). A SkyRL generator would
sample the actions; here they are the replies a policy writes in the Hermes ``<tool_call>`` format the
environment's system message asks for: the task's reference solution one call per turn, a reply that
does nothing, and one that breaks a guard. Each episode's reward must be the one Palaestra's own
collector gives the same behaviour (scripted oracle / null policy through ``palaestra.collect_sync``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("skyrl_gym", reason="skyrl: skyrl-gym is not installed (pip install 'palaestra[skyrl]')")

import skyrl_gym
from omegaconf import DictConfig

import palaestra
from palaestra.core.errors import ConfigError
from palaestra.core.records import Task
from palaestra.envs.registry import load_env
from palaestra.integrations import skyrl
from palaestra.models.local.toolcalls import render_call


@pytest.fixture(scope="module")
def tasks() -> Iterator[list[Task]]:
    env = load_env("workplace")
    # four tasks of one, two and three reference calls (calendar, email, tickets)
    yield [t for t in env.examples() if env.reference(t) is not None][:4]
    skyrl.close_all()


def _make(row: dict[str, Any], **config: Any) -> Any:
    skyrl.register_env()
    return skyrl_gym.make("palaestra", env_config=DictConfig(config), extras=row)


def _episode(env: Any, actions: list[str]) -> list[dict[str, Any]]:
    """Run actions until done (as SkyRL's generator does); every step's output."""
    outputs = []
    for action in actions:
        out = env.step(action)
        outputs.append(out)
        if out["done"]:
            break
    env.close()
    return outputs


def _oracle_actions(task: Task) -> list[str]:
    ref = load_env("workplace").reference(task)
    assert ref is not None
    return [render_call(c.name, c.arguments) for c in ref.tool_calls] + [ref.final_answer or "Done."]


def test_reference_solutions_through_skyrl_score_what_palaestra_scores(tasks: list[Task]) -> None:
    expected = {r.task_id: r.verdict.reward for r in palaestra.collect_sync(tasks, model="scripted:oracle")}
    assert len(expected) == len(tasks)
    for row in skyrl.dataset_rows(tasks):
        assert set(row) == {"prompt", "env_class", "task"} and row["env_class"] == "palaestra"
        env = _make(row)
        assert isinstance(env, skyrl_gym.envs.base_text_env.BaseTextEnv)
        prompt, info = env.init(row["prompt"])
        assert prompt[0]["role"] == "system" and "<tools>" in prompt[0]["content"]
        assert "cancel_event" in info["tools"] and prompt[-1]["content"] == row["task"]["input"]
        actions = _oracle_actions(Task.model_validate(row["task"]))
        outputs = _episode(env, actions)
        assert len(outputs) == len(actions)  # one step per reference call, then the answer
        for out in outputs[:-1]:  # a tool turn: its output comes back, no reward yet
            assert not out["done"] and out["reward"] == 0.0
            assert out["observations"][0]["content"].startswith("<tool_response>")
            assert "Error" not in out["observations"][0]["content"]
        last = outputs[-1]
        assert last["done"] and last["observations"] == []
        task_id = row["task"]["id"]
        assert last["reward"] == pytest.approx(expected[task_id]) and last["reward"] == pytest.approx(1.0)
        assert last["metadata"]["verdict"]["passed"] is True
        assert env.get_metrics()["tool_calls"] == len(actions) - 1


def test_doing_nothing_scores_zero_as_palaestra_does(tasks: list[Task]) -> None:
    expected = {r.task_id: r.verdict.reward for r in palaestra.collect_sync(tasks, model="scripted:null")}
    for row in skyrl.dataset_rows(tasks):
        env = _make(row)
        env.init(row["prompt"])
        (out,) = _episode(env, ["I could not do that."])
        assert out["done"] and out["reward"] == pytest.approx(expected[row["task"]["id"]]) == 0.0
        assert out["metadata"]["verdict"]["passed"] is False


def test_a_broken_guard_gives_no_reward_even_when_the_change_was_made(tasks: list[Task]) -> None:
    task = next(t for t in tasks if t.id == "workplace-cancel-thursday-standup")
    (row,) = skyrl.dataset_rows([task])
    env = _make(row)
    env.init(row["prompt"])
    outputs = _episode(env, [render_call("cancel_event", {"event_id": 6}), render_call("cancel_event", {"event_id": 1}),
                             "Cancelled both standups."])
    verdict = outputs[-1]["metadata"]["verdict"]
    assert verdict["components"]["Thursday standup cancelled"] == 1.0  # the asked change was made ...
    assert verdict["metadata"]["guards_broken"] == ["Monday standup kept"]  # ... but Monday's was not kept
    assert outputs[-1]["reward"] == 0.0


def test_max_turns_ends_the_episode_with_a_verdict_and_tool_errors_are_observations(tasks: list[Task]) -> None:
    (row,) = skyrl.dataset_rows(tasks[:1], max_turns=2)
    env = _make(row, observation_role="tool")
    env.init(row["prompt"])
    first = env.step(render_call("cancel_event", {"event_id": 999}))
    assert not first["done"] and first["observations"][0]["role"] == "tool"
    assert "Error" in first["observations"][0]["content"] and "999" in first["observations"][0]["content"]
    second = env.step(render_call("cancel_event", {"event_id": 6}))  # the 2nd turn: the episode ends here
    assert second["done"] and second["metadata"]["stop_reason"] == "max_steps"
    assert second["reward"] == 0.0  # the call at the limit is not run: nothing was cancelled
    assert json.dumps(second["metadata"]["verdict"])  # plain JSON, for SkyRL's logs


def test_a_row_without_a_task_is_refused_naming_the_column() -> None:
    with pytest.raises(ConfigError, match="'task' column"):
        _make({"prompt": [{"role": "user", "content": "hi"}], "env_class": "palaestra"})
