"""A Palaestra environment as a ``verifiers`` environment (the classic API of verifiers 0.3:
``vf.MultiTurnEnv``; what prime-rl trains on and ``vf-eval`` / ``env.evaluate`` run).

verifiers owns the loop: it samples the model through its own client, asks the environment for the next
messages (``env_response``) until a stop condition holds, then scores the rollout with its rubric.
``PalaestraVerifiersEnv`` keeps everything on the environment's side Palaestra's:

- the dataset is one row per Palaestra task: the first messages and the tools of a real session (the
  environment's system prompt and tool schemas, as ``info.tool_defs``), so the policy sees exactly what
  Palaestra's own runs show it;
- each rollout opens its own session (``setup_state``); the model's tool calls run in it
  (``env_response``), with tool errors as tool messages the model reads;
- a reply without tool calls ends the rollout (``max_turns`` bounds it); the session's verifier scores the
  whole conversation (a ``vf.cleanup`` handler, before the session closes), and the rubric's one reward
  function, ``palaestra_reward``, is that verdict's reward (``state["palaestra_verdict"]`` keeps the rest);
- an infrastructure failure (environment, sandbox, verifier) is verifiers' own failure record,
  ``state["error"] = vf.InfraError(...)``, and its reward is NaN, never a 0 a trainer would learn from.

``load_environment(env="workplace", limit=...)`` is the ``verifiers`` entry-point convention.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import verifiers as vf
from datasets import Dataset
from verifiers.types import ToolMessage

from palaestra.core.errors import PalaestraError
from palaestra.core.records import Task
from palaestra.envs.registry import load_env
from palaestra.integrations.episodes import Episode, Mounts, SyncEpisodes

VERDICT = "palaestra_verdict"


def _plain(message: Any) -> dict[str, Any]:
    """A verifiers message (a pydantic model or a dict) as an OpenAI chat dict."""
    data = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    out: dict[str, Any] = {k: v for k, v in data.items() if k in ("role", "content", "tool_call_id")}
    calls = data.get("tool_calls")
    if calls:
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
    return out


def _tool_def(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool as a ``vf.Tool`` dict (name, description, parameters)."""
    fn = tool.get("function", tool)
    return {"name": fn["name"], "description": fn.get("description") or "",
            "parameters": fn.get("parameters") or {"type": "object", "properties": {}}}


def task_rows(env_spec: str, tasks: Sequence[Task], placement: str = "direct") -> list[dict[str, Any]]:
    """One verifiers dataset row per task, from a real session of each (opened, then closed unverified).
    ``info`` is a JSON string (verifiers decodes it): Arrow would otherwise merge the tools' different
    JSON schemas into one struct and fill the gaps with nulls."""
    episodes = SyncEpisodes()
    try:
        rows = []
        for i, task in enumerate(tasks):
            episode = episodes.run(episodes.mounts.open(env_spec, task, placement))
            episodes.run(episode.close())
            info = {"palaestra_task": task.model_dump(mode="json", exclude_none=True),
                    "tool_defs": [_tool_def(t) for t in episode.tools]}
            rows.append({"example_id": i, "prompt": [_plain(m) for m in episode.messages], "answer": "",
                         "info": json.dumps(info)})
        return rows
    finally:
        episodes.close()


async def palaestra_reward(state: vf.State) -> float:
    """The verdict's reward; NaN when the environment could not score the rollout (``state["error"]``)."""
    verdict = state.get(VERDICT)
    return float(verdict["reward"]) if verdict else math.nan


class PalaestraVerifiersEnv(vf.MultiTurnEnv):
    """Palaestra tasks of one environment, run and scored by that environment (see the module docstring)."""

    def __init__(self, env_spec: str, tasks: Sequence[Task], *, placement: str = "direct", max_turns: int = 16,
                 **kwargs: Any) -> None:
        self.env_spec = env_spec
        self.placement = placement
        self.mounts = Mounts()
        self._episodes: dict[str, Episode] = {}
        dataset = Dataset.from_list(task_rows(env_spec, tasks, placement))
        super().__init__(dataset=dataset, eval_dataset=dataset, max_turns=max_turns,
                         rubric=vf.Rubric(funcs=[palaestra_reward], weights=[1.0]), **kwargs)

    async def setup_state(self, state: vf.State) -> vf.State:
        task = Task.model_validate(state["info"]["palaestra_task"])
        try:
            self._episodes[state["trajectory_id"]] = await self.mounts.open(self.env_spec, task, self.placement)
        except PalaestraError as exc:
            raise vf.InfraError(f"palaestra {exc.kind}: {exc}") from exc  # verifiers records it in state
        return state

    @vf.stop
    async def no_tool_calls(self, state: vf.State) -> bool:
        """The model answered without calling a tool: its reply is the final answer."""
        if not state["trajectory"]:
            return False
        last = state["trajectory"][-1]["completion"][-1]
        return bool(last.role == "assistant" and not getattr(last, "tool_calls", None))

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        episode = self._episodes[state["trajectory_id"]]
        last = messages[-1]
        replies: list[Any] = []
        for call in getattr(last, "tool_calls", None) or []:
            try:
                text = await episode.call(call.name, call.arguments, call.id)
            except PalaestraError as exc:  # no answer from the environment: the rollout failed, not the model
                raise vf.InfraError(f"palaestra {exc.kind}: {exc}") from exc
            replies.append(ToolMessage(role="tool", tool_call_id=call.id, content=text))
        return replies

    @vf.cleanup
    async def verify_session(self, state: vf.State) -> None:
        """Score the rollout with the session's verifier, then close the session. Runs after verifiers
        rendered ``completion`` (its own cleanup, priority 100) and before the rubric reads the verdict."""
        episode = self._episodes.pop(state["trajectory_id"], None)
        if episode is None:
            return
        if state.get("error") is not None:  # the model or the environment failed: nothing to score
            await episode.close()
            return
        episode.messages = [_plain(m) for m in [*state["prompt"], *(state.get("completion") or [])]]
        last = episode.messages[-1] if episode.messages else {}
        answered = last.get("role") == "assistant" and not last.get("tool_calls")
        final = str(last.get("content") or "") if answered else None
        try:
            verdict = await episode.finish(final, stop_reason="final" if final is not None else "max_steps",
                                           steps=len(state["trajectory"]))
        except PalaestraError as exc:
            state["error"] = vf.InfraError(f"palaestra {exc.kind}: {exc}")
            return
        state[VERDICT] = verdict.model_dump(mode="json")

    @vf.teardown
    async def stop_mounts(self) -> None:
        await self.mounts.stop()


def load_environment(env: str = "workplace", limit: int | None = None, placement: str = "direct",
                     max_turns: int = 16, **kwargs: Any) -> PalaestraVerifiersEnv:
    """verifiers' entry point: the bundled tasks of Palaestra environment ``env`` (the first ``limit``)."""
    tasks = load_env(env).examples()
    return PalaestraVerifiersEnv(env, tasks[:limit] if limit else tasks, placement=placement,
                                 max_turns=max_turns, **kwargs)
