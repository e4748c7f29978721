"""TRL, ready-made: Palaestra environments (multi-turn, tools, sandboxes) as ``GRPOTrainer``'s rollouts.

    from palaestra.integrations.trl import PalaestraRollouts, palaestra_reward
    rollouts = PalaestraRollouts(tasks, tool_choice=["required", "none"])
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=GRPOConfig(...),
                          train_dataset=rollouts.dataset(), reward_funcs=[palaestra_reward],
                          rollout_func=rollouts)

What the trainer gets from each call (TRL's ``rollout_func`` contract, TRL 1.16):

- **Its own batch order.** The trainer's sampler repeats each prompt ``num_generations`` times in a row;
  each run of repeats is one Palaestra group (one task, k rollouts through the collector), and the groups
  come back in the trainer's order whatever order they finished in.
- **Tasks by id.** ``dataset()`` puts each task's id on its prompt messages (``palaestra_task_id``), so a
  prompt maps back to its task by id, never by text (two tasks may ask the same question).
- **Exact tokens.** ``prompt_ids`` are the ids of the policy's first prompt; ``completion_ids`` are
  everything after it (the policy's turns and the environment's tool output between them) with
  ``env_mask`` 1 exactly on the ids the policy sampled and ``logprobs`` their sampling logprobs (0.0
  elsewhere). With the in-process policy every turn continues the previous turn's ids
  (``ContinuationBackend``), so a multi-turn rollout is one exact sequence.
- **Rewards from Palaestra's verifiers** (``palaestra_reward`` reads them). A rollout whose
  infrastructure failed, that timed out, or whose turns do not form one sequence (drift) is re-sampled up
  to ``resample`` times; a slot still without a trainable rollout gets a placeholder with an all-zero
  ``env_mask`` and reward ``None``: TRL leaves it out of the group baseline and gives it no advantage.
  Nothing is ever scored 0 for a failure.

The policy is the trainer's own model, served in-process from its live weights (no URL, no copy), or an
OpenAI-compatible server that returns token ids (``policy_url``: vLLM or SGLang with token capture,
whose weights the user keeps in sync). Unsloth: pass the model ``FastLanguageModel.from_pretrained``
returns; the rest is the same (docs/training.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from palaestra.core.errors import ConfigError
from palaestra.core.records import Rollout, Task
from palaestra.integrations.bridge import LoopThread, TurnToolChoice
from palaestra.models.base import ModelBackend
from palaestra.train.rollout_service import RolloutService, make_policy_backend
from palaestra.train.sequence import TokenSample, build_samples
from palaestra.train.service_types import Group, JobSpec, PolicyEndpoint

__all__ = ["PROMPT_KEY", "REWARD_FIELD", "PalaestraRollouts", "RolloutStats", "palaestra_reward", "task_dataset"]

log = logging.getLogger(__name__)
PROMPT_KEY = "palaestra_task_id"  # on every prompt message of the dataset: the task the prompt stands for
REWARD_FIELD = "palaestra_reward"  # the extra column rollout_func hands the reward function


def task_dataset(tasks: Sequence[Task]) -> Any:
    """A ``datasets.Dataset`` with TRL's conversational ``prompt`` column (the task's messages, each
    tagged with the task id) and a ``task_id`` column."""
    import datasets

    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ConfigError("task ids repeat", hint="a prompt maps back to its task by id: give every task its own id")
    rows = [{"prompt": [{**m, PROMPT_KEY: t.id} for m in _text_messages(t)], "task_id": t.id} for t in tasks]
    return datasets.Dataset.from_list(rows)


def _text_messages(task: Task) -> list[dict[str, Any]]:
    out = []
    for m in task.messages():
        content = m.get("content")
        out.append({"role": str(m.get("role")), "content": content if isinstance(content, str) else str(content)})
    return out


@contextlib.contextmanager
def _sampling_mode(model: Any) -> Iterator[None]:
    """The in-process policy samples in eval mode: in train mode a model with gradient checkpointing turns
    its KV cache off (every new token recomputes the whole sequence: minutes per step on a CPU), and
    dropout would make the recorded logprobs noisy. The trainer's mode is restored afterwards."""
    training = bool(getattr(model, "training", False))
    if training:
        model.eval()
    try:
        yield
    finally:
        if training:
            model.train()


def palaestra_reward(completions: list[Any], **columns: Any) -> list[float | None]:
    """The reward function to give ``GRPOTrainer``: the verifier's reward of each rollout, ``None`` for a
    slot without a scored rollout (TRL excludes it instead of scoring it 0)."""
    rewards = columns.get(REWARD_FIELD)
    if rewards is None:
        raise ConfigError(f"no '{REWARD_FIELD}' column reached the reward function",
                          hint="pass a PalaestraRollouts object as the trainer's rollout_func")
    return [None if r is None else float(r) for r in rewards]


@dataclass
class RolloutStats:
    """What the rollout function did, over the trainer's whole run."""

    calls: int = 0
    rollouts: int = 0  # trainable rollouts delivered
    resampled: int = 0  # rollouts sampled again (failed, timed out, drifted)
    dropped: int = 0  # slots given a placeholder after every re-sample failed
    turns: list[int] = field(default_factory=list)  # model calls per delivered rollout
    failures: dict[str, int] = field(default_factory=dict)  # why rollouts were re-sampled, by kind


@dataclass
class _Slot:
    rollout: Rollout | None = None
    sample: TokenSample | None = None


class PalaestraRollouts:
    """``rollout_func`` for TRL's ``GRPOTrainer`` over Palaestra tasks (see the module docstring).

    ``tasks``: the training tasks (``dataset()`` builds the trainer's dataset from them; ``extra_tasks``
    are known too, for an eval dataset). Policy: the trainer's model in-process (default), ``backend`` (a
    ``ModelBackend`` that returns token ids), or ``policy_url`` (+ ``policy_model``). ``agent``,
    ``max_steps``, ``placement``, ``temperature``, ``max_tokens`` and ``seed`` mean what they mean for
    ``palaestra.collect`` (member i of a group samples with the step's seed + i). ``tool_choice``: one
    value or a per-turn schedule (``TurnToolChoice``). ``continuation``: continue each turn from the
    previous turn's exact ids (default: on in-process, off for a URL, whose server must understand
    ``continue_token_ids`` for it). ``resample``: attempts per failed slot before it is dropped."""

    def __init__(self, tasks: Sequence[Task], *, extra_tasks: Sequence[Task] = (), backend: ModelBackend | None = None,
                 policy_url: str | None = None, policy_model: str | None = None, agent: str = "tool",
                 max_steps: int = 4, placement: str = "direct", temperature: float = 1.0, max_tokens: int = 64,
                 seed: int = 0, tool_choice: Any = None, continuation: bool | None = None, resample: int = 2,
                 rollout_deadline_s: float = 600.0, max_in_flight: int = 32, max_batch: int = 32) -> None:
        if backend is not None and policy_url is not None:
            raise ConfigError("both backend and policy_url given", hint="give one policy")
        if resample < 0 or max_in_flight < 1:
            raise ConfigError(f"resample={resample} must be >= 0 and max_in_flight={max_in_flight} >= 1")
        self.tasks = list(tasks)
        self._by_id: dict[str, Task] = {}
        for t in [*self.tasks, *extra_tasks]:
            if t.id in self._by_id and self._by_id[t.id] != t:
                raise ConfigError(f"two different tasks have id {t.id!r}", hint="task ids must be unique")
            if not t.env:
                raise ConfigError(f"task {t.id!r} names no environment", hint="set the task's env")
            self._by_id[t.id] = t
        self.agent, self.max_steps, self.placement = agent, max_steps, placement
        self.sampling: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens}
        self.seed, self.resample, self.max_in_flight, self.max_batch = seed, resample, max_in_flight, max_batch
        self.rollout_deadline_s = rollout_deadline_s
        self.tool_choice = tool_choice
        self.policy = None if policy_url is None else PolicyEndpoint.model_validate(
            {"base_url": policy_url, "model": policy_model, "capture_tokens": True,
             "continue_tokens": bool(continuation)})
        self.continuation = (policy_url is None) if continuation is None else continuation
        self.stats = RolloutStats()
        self.last_batch: list[Rollout | None] = []  # the rollout behind each slot of the last call
        self._given = backend
        self._backend: ModelBackend | None = None
        self._owned: ModelBackend | None = None  # what this object built and must close
        self._model: Any = None  # the trainer's model, when it is the policy
        self._eos = 0
        self._bridge = LoopThread()
        self._service = RolloutService()
        self._calls = 0

    # ---- TRL's side -------------------------------------------------------------------------------
    def dataset(self, tasks: Sequence[Task] | None = None) -> Any:
        """The trainer's dataset (``train_dataset``); ``tasks`` for another split (``extra_tasks``)."""
        chosen = self.tasks if tasks is None else list(tasks)
        unknown = [t.id for t in chosen if self._by_id.get(t.id) != t]
        if unknown:
            raise ConfigError(f"task(s) {', '.join(unknown[:5])} were not given to PalaestraRollouts",
                              hint="pass them as tasks or extra_tasks")
        return task_dataset(chosen)

    @property
    def reward_funcs(self) -> list[Any]:
        return [palaestra_reward]

    def bind(self, trainer: Any) -> None:
        """Serve the trainer's model (its live weights) as the policy; done on the first call, or earlier
        to evaluate before training."""
        if self._backend is not None:
            return
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        self._eos = int(tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.pad_token_id or 0)
        backend = self._given
        if backend is None and self.policy is not None:
            backend = self._owned = make_policy_backend(self.policy)  # continuation as the endpoint says
        elif backend is None:
            from palaestra.train.local_policy import TrainableLocalBackend

            model = self._model = trainer.accelerator.unwrap_model(trainer.model)
            local = TrainableLocalBackend.from_model(model, tokenizer, name="trainer-policy",
                                                     max_batch=self.max_batch,
                                                     default_max_tokens=int(self.sampling["max_tokens"]))
            local.start()
            backend = self._owned = local
            if self.continuation:
                from palaestra.train.continuation import ContinuationBackend

                backend = ContinuationBackend(local)
        elif self.continuation:
            from palaestra.train.continuation import ContinuationBackend

            backend = ContinuationBackend(backend)
        if self.tool_choice is not None:
            schedule = self.tool_choice if isinstance(self.tool_choice, (list, tuple)) else [self.tool_choice]
            backend = TurnToolChoice(backend, schedule)
        self._backend = backend

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's hook: one completion per prompt, in the trainer's order."""
        self.bind(trainer)
        training = bool(getattr(trainer.model, "training", True))
        k = int(trainer.num_generations if training else trainer.num_generations_eval)
        ids = [self._task_id(p) for p in prompts]
        if k < 1 or len(ids) % k:
            raise ConfigError(f"{len(ids)} prompts do not split into groups of {k}",
                              hint="let GRPOTrainer sample the dataset (its sampler repeats each prompt "
                                   "num_generations times)")
        chunks = [ids[i:i + k] for i in range(0, len(ids), k)]
        for chunk in chunks:
            if len(set(chunk)) != 1:
                raise ConfigError(f"a group of {k} prompts names several tasks ({', '.join(sorted(set(chunk)))})",
                                  hint="each prompt must repeat num_generations times in a row, as "
                                       "GRPOTrainer's sampler does")
        version = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        with _sampling_mode(self._model):
            slots = self._bridge.run(self._collect([self._by_id[c[0]] for c in chunks], k, version))
        self._calls += 1
        self.stats.calls += 1
        out = self._columns(slots, k)
        self._log(trainer, "train" if training else "eval", slots)
        return out

    def evaluate(self, tasks: Sequence[Task], *, k: int = 1, seed: int = 10_000, trainer: Any = None,
                 temperature: float | None = None) -> dict[str, Any]:
        """Mean verifier reward of the current policy on ``tasks`` (k samples each, fixed seeds, so two
        calls are paired): ``{"mean_reward", "scored", "failed", "turns"}``. Failed rollouts are counted,
        not scored."""
        if trainer is not None:
            self.bind(trainer)
        if self._backend is None:
            raise ConfigError("no policy yet", hint="pass trainer= (or call bind(trainer)) first")
        sampling = {**self.sampling, "seed": seed}
        if temperature is not None:
            sampling["temperature"] = temperature
        with _sampling_mode(self._model):
            groups = self._bridge.run(self._job(list(tasks), k, sampling, 0))
        rollouts = [r for g in groups if g is not None for r in g.rollouts]
        scored = [r for r in rollouts if r.reward is not None]
        return {"mean_reward": statistics.fmean(r.reward or 0.0 for r in scored) if scored else None,
                "scored": len(scored), "failed": len(tasks) * k - len(scored),
                "turns": statistics.fmean(len(r.trajectory.model_calls) for r in scored) if scored else None}

    def close(self) -> None:
        """Stop the environments and the in-process engine; the trainer's model is untouched."""
        async def stop() -> None:
            await self._service.aclose()
            if self._owned is not None:
                await self._owned.aclose()
        try:
            self._bridge.run(stop(), timeout=120)
        finally:
            self._bridge.close()

    def __enter__(self) -> PalaestraRollouts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- inside --------------------------------------------------------------------------------
    def _task_id(self, prompt: Any) -> str:
        messages = prompt if isinstance(prompt, list) else []
        found = next((m.get(PROMPT_KEY) for m in messages if isinstance(m, dict) and m.get(PROMPT_KEY)), None)
        if found is None:
            raise ConfigError(f"a prompt carries no '{PROMPT_KEY}'",
                              hint="build the trainer's dataset with PalaestraRollouts.dataset()")
        if found not in self._by_id:
            raise ConfigError(f"a prompt names task {found!r}, which was not given to PalaestraRollouts",
                              hint="pass it in tasks or extra_tasks")
        return str(found)

    async def _job(self, tasks: list[Task], k: int, sampling: dict[str, Any], version: int) -> list[Group | None]:
        """The groups of ``tasks`` (k members each) in task order; None where a group was lost."""
        assert self._backend is not None
        in_flight = max(1, self.max_in_flight // k)
        spec = JobSpec.model_validate({
            "tasks": tasks, "group_size": k, "policy": self.policy, "sampling": sampling, "agent": self.agent,
            "max_steps": self.max_steps, "placement": self.placement, "rollout_deadline_s": self.rollout_deadline_s,
            "policy_version": version, "max_groups_in_flight": in_flight,
            "max_buffered_groups": max(len(tasks), 2 * in_flight)})
        job = await self._service.submit(spec, backend=self._backend)
        found: list[Group | None] = [None] * len(tasks)
        try:
            async for group in job:
                found[group.group_id] = group
        finally:
            await self._service.forget(job.id)
        return found

    def _trainable(self, rollout: Rollout) -> tuple[TokenSample | None, str]:
        """The rollout's one training sequence, or why it has none (the re-sample reason)."""
        if rollout.outcome.status != "scored" or rollout.reward is None:
            return None, str(rollout.outcome.kind or rollout.outcome.status)
        result = build_samples(rollout, "drop")
        if result.skipped and "token ids" in result.skipped:
            raise ConfigError(f"the policy returned no token ids: {result.skipped}",
                              hint="use the in-process policy, or a vLLM/SGLang endpoint with token capture")
        if result.skipped or len(result.samples) != 1 or result.samples[0].completion_logprobs is None:
            return None, "drift" if result.drifts else "untrainable"
        return result.samples[0], ""

    async def _collect(self, tasks: list[Task], k: int, version: int) -> list[list[_Slot]]:
        base = self.seed + 1_000_003 * self._calls
        groups = await self._job(tasks, k, {**self.sampling, "seed": base}, version)
        slots = [[_Slot() for _ in range(k)] for _ in tasks]
        for c, group in enumerate(groups):
            for m, rollout in enumerate(group.rollouts if group is not None else []):
                self._fill(slots[c][m], rollout)
        for attempt in range(1, self.resample + 1):
            missing = [(c, [m for m, s in enumerate(row) if s.sample is None]) for c, row in enumerate(slots)]
            missing = [(c, ms) for c, ms in missing if ms]
            if not missing:
                break
            self.stats.resampled += sum(len(ms) for _, ms in missing)
            seed = base + 7919 * attempt
            redo = await asyncio.gather(*(self._job([tasks[c]], len(ms), {**self.sampling, "seed": seed + 101 * c},
                                                    version) for c, ms in missing))
            for (c, ms), again in zip(missing, redo):
                for m, rollout in zip(ms, again[0].rollouts if again[0] is not None else []):
                    self._fill(slots[c][m], rollout)
        return slots

    def _fill(self, slot: _Slot, rollout: Rollout) -> None:
        sample, why = self._trainable(rollout)
        if sample is None:
            self.stats.failures[why] = self.stats.failures.get(why, 0) + 1
            log.warning("rollout %s of task %s is not trainable (%s): re-sampling", rollout.rollout_id,
                        rollout.task_id, why)
            return
        slot.rollout, slot.sample = rollout, sample

    def _columns(self, slots: list[list[_Slot]], k: int) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                     REWARD_FIELD: [], "palaestra_turns": []}
        self.last_batch = []
        for row in slots:
            head = next((s.sample.prompt_ids for s in row if s.sample is not None), [self._eos])
            for slot in row:
                s, r = slot.sample, slot.rollout
                if s is None or r is None:  # every attempt failed: no loss, no reward, out of the baseline
                    self.stats.dropped += 1
                    values: list[Any] = [list(head), [self._eos], [0.0], [0], None, 0]
                else:
                    turns = len(r.trajectory.model_calls)
                    self.stats.rollouts += 1
                    self.stats.turns.append(turns)
                    values = [list(s.prompt_ids), list(s.completion_ids), list(s.completion_logprobs or []),
                              list(s.completion_mask), r.reward, turns]
                for name, value in zip(out, values):
                    out[name].append(value)
                self.last_batch.append(r if s is not None else None)
        return out

    def _log(self, trainer: Any, mode: str, slots: list[list[_Slot]]) -> None:
        """Palaestra's numbers in the trainer's logs (TRL averages ``_metrics`` per logging step)."""
        metrics = getattr(trainer, "_metrics", None)
        if not isinstance(metrics, dict) or mode not in metrics:
            return
        done = [s.rollout for row in slots for s in row if s.rollout is not None]
        total = sum(len(row) for row in slots)
        values = {"palaestra/dropped_frac": (total - len(done)) / max(total, 1)}
        if done:
            values["palaestra/turns_mean"] = statistics.fmean(len(r.trajectory.model_calls) for r in done)
            values["palaestra/tool_calls_mean"] = statistics.fmean(len(r.trajectory.tool_calls) for r in done)
        for name, value in values.items():
            metrics[mode].setdefault(name, []).append(value)
