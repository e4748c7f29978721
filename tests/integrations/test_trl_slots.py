"""The TRL rollout function without torch: groups come back in the trainer's order whatever order they
finish in, prompts map to tasks by id (two tasks with the same text stay apart), a failed rollout is
re-sampled and, when every attempt fails, its slot gets no loss and no reward (None, never 0); the sync
``collect_sync`` returns groups in task order. The policy is a byte-level model (ids = UTF-8 bytes of the
reply, prompt ids = bytes of the rendered conversation): a real backend with token ids, small enough to
run anywhere."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import pytest

from palaestra import Task, Trajectory, Verdict
from palaestra.core.errors import EnvironmentFailure
from palaestra.models.base import CallContext
from palaestra.train.arith_env import Arith, make_tasks

pytest.importorskip("datasets", reason="trl: the datasets package is not installed (the [trl] extra)")


class FlakyArith(Arith):
    """``arith`` whose verifier fails (an infrastructure failure) as many times as the task's
    ``metadata.fail_file`` says (the environment is loaded from this file as a module of its own, so the
    count lives on disk)."""

    name = "flaky_arith"

    def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        path = state.metadata.get("fail_file")
        left = int(Path(path).read_text()) if path else 0
        if left:
            Path(path).write_text(str(left - 1))
            raise EnvironmentFailure(f"injected failure for {state.id}")
        return super().verify(state, trajectory)


class BytePolicy:
    """Answers each task's sum (or a wrong one for odd seeds); the first task is the slowest."""

    name = model = "bytes"

    async def chat(self, request: dict[str, Any], ctx: CallContext | None = None) -> dict[str, Any]:
        messages = request["messages"]
        question = messages[-1]["content"]
        a, b = (int(x) for x in question.split("What is ")[1].split("?")[0].split(" + "))
        seed = int(request.get("seed") or 0)
        reply = str(a + b) if seed % 2 == 0 else f"It is {a + b + 1}"
        await asyncio.sleep(0.05 if a == 1 else 0.0)
        prompt = "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"
        gen = list(reply.encode())
        return {"choices": [{"index": 0, "finish_reason": "stop", "token_ids": gen,
                             "message": {"role": "assistant", "content": reply},
                             "logprobs": {"content": [{"token": chr(t), "logprob": -0.5} for t in gen]}}],
                "prompt_token_ids": list(prompt.encode()), "usage": {"prompt_tokens": len(prompt),
                                                                     "completion_tokens": len(gen)}}

    async def aclose(self) -> None:
        return None


def _trainer(k: int) -> Any:
    tok = types.SimpleNamespace(eos_token_id=0, pad_token_id=0)
    return types.SimpleNamespace(processing_class=tok, num_generations=k, num_generations_eval=k,
                                 model=types.SimpleNamespace(training=True),
                                 state=types.SimpleNamespace(global_step=3), _metrics={"train": {}, "eval": {}})


def _tasks(tmp: Path, fails: dict[int, int] | None = None) -> list[Task]:
    env = f"{__file__}:FlakyArith"
    base = make_tasks(3, split="train", seed=5)
    base.append(base[0].model_copy(update={"id": "twin"}))  # the same text as task 0, another id
    out = []
    for i, t in enumerate(base):
        meta = dict(t.metadata)
        if fails and i in fails:
            (tmp / f"fail-{i}").write_text(str(fails[i]))
            meta["fail_file"] = str(tmp / f"fail-{i}")
        out.append(t.model_copy(update={"env": env, "metadata": meta}))
    return out


def test_slots_keep_the_trainer_order_and_failures_are_never_scored(tmp_path: Path) -> None:
    from palaestra.integrations.trl import PROMPT_KEY, REWARD_FIELD, PalaestraRollouts, palaestra_reward

    tasks = _tasks(tmp_path, {1: 1, 2: 100})  # one failure that a re-sample gets past; one that never passes
    with PalaestraRollouts(tasks, backend=BytePolicy(), agent="single", continuation=False, resample=2,
                           seed=0) as rollouts:
        data = rollouts.dataset()
        assert data[3]["prompt"][0][PROMPT_KEY] == "twin" and data[3]["prompt"][0]["content"] == tasks[0].input
        order = [3, 2, 0, 1]  # the trainer's order, each prompt twice in a row
        prompts = [data[i]["prompt"] for i in order for _ in range(2)]
        trainer = _trainer(2)
        out = rollouts(prompts, trainer)
        batch = rollouts.last_batch
    ids = [tasks[i].id for i in order for _ in range(2)]
    assert [r.task_id if r is not None else None for r in batch] == [
        i if i != tasks[2].id else None for i in ids]
    rewards = out[REWARD_FIELD]
    for slot, task_id in enumerate(ids):
        if task_id == tasks[2].id:  # every attempt failed: no loss, no reward
            assert rewards[slot] is None and out["env_mask"][slot] == [0]
            assert out["prompt_ids"][slot] == [0] and out["completion_ids"][slot] == [0]
        else:
            r = batch[slot]
            assert r is not None and rewards[slot] == r.reward
            assert out["completion_ids"][slot] == r.trajectory.model_calls[0].generation_token_ids
            assert out["env_mask"][slot] == [1] * len(out["completion_ids"][slot])
            assert out["logprobs"][slot] == [-0.5] * len(out["completion_ids"][slot])
    assert palaestra_reward([None] * 8, **{REWARD_FIELD: rewards}) == rewards
    assert None in rewards and 0.0 not in [rewards[s] for s, t in enumerate(ids) if t == tasks[2].id]
    # member i samples with the step's seed + i: one exact answer (1.0) and one wrong, unformatted one (0.0)
    assert sorted(rewards[0:2]) == [0.0, 1.0]
    stats = rollouts.stats
    # task 2: 2 members failed, re-sampled twice; task 1: one member failed once
    assert stats.dropped == 2 and stats.resampled == 2 + 1 + 2 and stats.failures == {"environment": 2 + 1 + 2 + 2}
    assert trainer._metrics["train"]["palaestra/dropped_frac"] == [0.25]


def test_prompts_must_come_in_groups_of_one_task(tmp_path: Path) -> None:
    from palaestra.core.errors import ConfigError
    from palaestra.integrations.trl import PalaestraRollouts

    tasks = _tasks(tmp_path)
    with PalaestraRollouts(tasks, backend=BytePolicy(), agent="single", continuation=False) as rollouts:
        data = rollouts.dataset()
        with pytest.raises(ConfigError, match="several tasks"):
            rollouts([data[0]["prompt"], data[1]["prompt"]], _trainer(2))
        with pytest.raises(ConfigError, match="carries no"):
            rollouts([[{"role": "user", "content": "hi"}]] * 2, _trainer(2))


def test_collect_sync_returns_groups_in_task_order() -> None:
    from palaestra.api import collect_sync

    tasks = [t.model_copy(update={"env": "arith"}) for t in make_tasks(3, split="train", seed=1)]
    groups = collect_sync(tasks, k=2, groups=True, model="scripted:oracle")
    assert [g.task_id for g in groups] == [t.id for t in tasks]
    assert all(r.reward == 1.0 for g in groups for r in g.rollouts)
    rollouts = collect_sync(tasks, k=2, model="scripted:oracle")
    assert [r.task_id for r in rollouts] == [t.id for t in tasks for _ in range(2)]
