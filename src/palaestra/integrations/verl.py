"""VeRL, ready-made: Palaestra environments (multi-turn, tools, sandboxes) as VeRL agent loops.

    rows = verl_rows(tasks); write_dataset(tasks, "train.parquet")   # data.train_files
    actor_rollout_ref.rollout.agent.default_agent_loop=palaestra       # or agent_name per row (set here)
    reward.custom_reward_function.path=<this file> .name=compute_score  # only for rows without a loop reward

The three pieces and why each is needed:

- **Dataset** (``verl_rows``): VeRL's ``RLHFDataset`` reads parquet rows with ``data_source``, ``prompt``
  (chat messages), ``ability``, ``reward_model`` and ``extra_info``. The Palaestra task travels whole, as
  JSON, in ``extra_info["palaestra_task"]``, so a row maps back to its task exactly (never by prompt text),
  and ``agent_name`` routes the row to the agent loop below.
- **Agent loop** (``PalaestraAgentLoop``, registered as ``palaestra``): VeRL's rollout worker calls it once
  per sample. It runs one Palaestra rollout (the environment's tools, its agent, its verifier) whose policy
  is VeRL's own rollout server: every model turn is ``server_manager.generate(prompt_ids)``, token in and
  token out, so the ids VeRL trains on are the ids its server sampled. Each turn continues the previous
  turn's exact ids (``ContinuationBackend``): the rollout is one sequence, ``response_mask`` is 1 exactly on
  the sampled ids and 0 on the tool output between turns, and ``reward_score`` is the verifier's reward.
  A rollout whose infrastructure failed (or whose turns drifted) is sampled again up to ``resample`` times;
  if none succeeds the loop raises rather than hand VeRL a reward of 0 for a failure.
- **Reward function** (``compute_score``): VeRL's reward manager signature, for rows a plain VeRL loop
  (``single_turn_agent``) generated: the text is scored by the task's Palaestra verifier.

``PalaestraTokenServer`` is VeRL's server interface over Palaestra's CPU engine (the local model), for runs
and tests without a GPU. Importing this module imports VeRL (the ``[verl]`` extra).
"""

from __future__ import annotations

import asyncio
import json
import uuid
import weakref
from concurrent.futures import Future
from typing import Any, cast, get_args

from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

from palaestra.core.errors import ConfigError, FailureKind, InfraError, ModelError
from palaestra.core.records import Rollout, Task, Trajectory, Verdict
from palaestra.integrations.bridge import TurnToolChoice
from palaestra.models.local.engine import Generation, Loaded, Params
from palaestra.placement import MountedEnv, mount_env
from palaestra.train.continuation import ContinuationBackend
from palaestra.train.local_policy import TrainableLocalBackend
from palaestra.train.rollout_service import RolloutService
from palaestra.train.sequence import TokenSample, build_samples
from palaestra.train.service_types import JobSpec

__all__ = ["AGENT_NAME", "TASK_FIELD", "PalaestraAgentLoop", "PalaestraTokenServer", "VerlServerPolicy",
           "close_environments", "compute_score", "task_of", "verl_rows", "write_dataset"]

AGENT_NAME = "palaestra"  # the agent loop's registered name (``agent_name`` of every row)
TASK_FIELD = "palaestra_task"  # in extra_info: the task as JSON
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")


# ---- (a) the dataset ---------------------------------------------------------------------------------
def verl_rows(tasks: list[Task], *, agent_name: str = AGENT_NAME) -> list[dict[str, Any]]:
    """One VeRL row per task: ``prompt`` holds the task's messages (what VeRL's dataset filters on length),
    ``extra_info`` the whole task. ``reward_model.ground_truth`` is left empty: the verifier decides."""
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ConfigError("task ids repeat", hint="a row maps back to its task by id: give every task its own id")
    rows = []
    for i, task in enumerate(tasks):
        if not task.env:
            raise ConfigError(f"task {task.id!r} names no environment", hint="set the task's env")
        messages = [{"role": str(m.get("role")), "content": m.get("content") if isinstance(m.get("content"), str)
                     else json.dumps(m.get("content"))} for m in task.messages()]
        rows.append({"data_source": f"palaestra/{task.env}", "prompt": messages, "ability": task.env,
                     "agent_name": agent_name, "reward_model": {"style": "palaestra", "ground_truth": ""},
                     "extra_info": {"index": i, "task_id": task.id, TASK_FIELD: task.model_dump_json()}})
    return rows


def write_dataset(tasks: list[Task], path: str, *, agent_name: str = AGENT_NAME) -> str:
    """Write ``verl_rows(tasks)`` as the parquet file VeRL's ``data.train_files`` names."""
    import pandas as pd

    pd.DataFrame(verl_rows(tasks, agent_name=agent_name)).to_parquet(path)
    return path


def task_of(extra_info: Any) -> Task:
    """The Palaestra task a VeRL row carries (``extra_info`` as the dataset hands it over)."""
    raw = extra_info.get(TASK_FIELD) if isinstance(extra_info, dict) else None
    if not isinstance(raw, str):
        raise ConfigError(f"a VeRL row carries no extra_info['{TASK_FIELD}']",
                          hint="build the dataset with palaestra.integrations.verl.write_dataset")
    return Task.model_validate_json(raw)


# ---- environments, one set per event loop (VeRL runs one loop per rollout worker) --------------------
_SERVICES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RolloutService] = weakref.WeakKeyDictionary()
_MOUNTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], MountedEnv]] = \
    weakref.WeakKeyDictionary()


def _service() -> RolloutService:
    """The worker's rollout service: environments are mounted once and shared by every sample."""
    loop = asyncio.get_running_loop()
    if loop not in _SERVICES:
        _SERVICES[loop] = RolloutService()
    return _SERVICES[loop]


async def close_environments() -> None:
    """Stop the environments this event loop mounted (a worker's shutdown; tests)."""
    loop = asyncio.get_running_loop()
    service = _SERVICES.pop(loop, None)
    if service is not None:
        await service.aclose()
    for mounted in _MOUNTS.pop(loop, {}).values():
        await mounted.stop()


# ---- (b) the reward function -------------------------------------------------------------------------
async def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                        placement: str = "direct", **_: Any) -> dict[str, Any]:
    """VeRL's ``compute_score``: the reward of ``solution_str`` as the task's final reply, by Palaestra's
    verifier (stateless ``verify``). A verifier that fails raises (VeRL fails the step): no reward of 0 is
    invented for an infrastructure failure."""
    task = task_of(extra_info)
    loop = asyncio.get_running_loop()
    mounts = _MOUNTS.setdefault(loop, {})
    key = (str(task.env), placement)
    if key not in mounts:
        mounts[key] = await mount_env(str(task.env), placement)
    trajectory = Trajectory(messages=[*task.messages(), {"role": "assistant", "content": solution_str}],
                            final_answer=solution_str)
    verdict: Verdict = await mounts[key].client.verify_stateless(task, trajectory)
    return {"score": float(verdict.reward), "passed": bool(verdict.is_pass())}


# ---- the policy: VeRL's rollout server behind Palaestra's backend contract ---------------------------
class _ServerEngine:
    """The engine interface ``LocalBackend`` drives (``submit`` → a future of a ``Generation``), answered by
    VeRL's ``server_manager.generate``. ``sampling`` is VeRL's own (temperature, top_p, top_k, logprobs...);
    ``max_tokens`` and stop strings come per turn, capped so all turns fit VeRL's ``response_length``."""

    def __init__(self, server: Any, loaded: Loaded, sampling: dict[str, Any], request_id: str,
                 response_length: int) -> None:
        self.server, self.sampling, self.request_id = server, sampling, request_id
        self.response_length = response_length
        self.loaded: Future[Loaded] = Future()
        self.loaded.set_result(loaded)
        self.first_prompt: int | None = None
        self.logprobs_returned = True  # False once the server answered a turn without logprobs

    def start(self) -> None:
        """Nothing to start: VeRL owns the server."""

    def close(self) -> None:
        """Nothing to stop: VeRL owns the server."""

    def submit(self, prompt: list[int], params: Params, constraint: Any = None) -> Future[Generation]:
        if constraint is not None and not getattr(self.server, "accepts_constraints", False):
            raise ModelError("tool_choice required/named needs constrained decoding, which VeRL's rollout "
                             "server does not offer here", hint="leave tool_choice unset (auto) for VeRL", status=400)
        if self.first_prompt is None:
            self.first_prompt = len(prompt)
        used = len(prompt) - self.first_prompt  # response tokens so far: earlier turns and tool output
        budget = max(1, min(params.max_new_tokens, self.response_length - used))
        sampling = {**self.sampling, "max_tokens": budget}
        if params.stop:
            sampling["stop"] = list(params.stop)
        extra = {"constraint": constraint} if constraint is not None else {}
        task = asyncio.ensure_future(self.server.generate(request_id=self.request_id, prompt_ids=list(prompt),
                                                          sampling_params=sampling, **extra))
        out: Future[Generation] = Future()
        task.add_done_callback(lambda t: self._settle(t, out, budget))
        out.add_done_callback(lambda f: task.cancel() if f.cancelled() else None)  # a rollout's deadline passed
        return out

    def _settle(self, task: asyncio.Task[Any], out: Future[Generation], budget: int) -> None:
        if out.done():  # cancelled by the rollout (its deadline): nobody waits for this answer
            return
        if task.cancelled():
            out.cancel()
            return
        exc = task.exception()
        if exc is not None:
            out.set_exception(exc)
            return
        result: TokenOutput = task.result()
        if result.stop_reason == "aborted":
            out.set_exception(ModelError("VeRL's rollout server aborted the request",
                                         hint="the rollout is sampled again"))
            return
        ids = [int(t) for t in result.token_ids]
        if result.log_probs is None or len(result.log_probs) != len(ids):
            self.logprobs_returned = False
        logprobs = ([float(v) for v in result.log_probs] if result.log_probs is not None
                    and len(result.log_probs) == len(ids) else [0.0] * len(ids))
        ended = bool(ids) and ids[-1] in self.loaded.result().eos_ids
        out.set_result(Generation(token_ids=ids, logprobs=logprobs, top_logprobs=[[] for _ in ids],
                                  finish_reason="length" if len(ids) >= budget and not ended else "stop"))


class VerlServerPolicy(TrainableLocalBackend):
    """A Palaestra model backend whose every turn is one call of VeRL's rollout server (``server``: the
    ``server_manager`` VeRL gives an agent loop). Prompts are rendered with VeRL's tokenizer the way the
    local model renders them (Hermes-style tool calls for templates without tools), replies are parsed
    into OpenAI ``tool_calls``, and continuation requests extend the previous ids exactly."""

    def __init__(self, server: Any, tokenizer: Any, sampling: dict[str, Any], *, request_id: str,
                 max_positions: int, response_length: int, name: str = "verl-policy") -> None:
        super().__init__(None, pull=False, default_max_tokens=response_length)
        self.model = name
        vocab = tokenizer.get_vocab()
        eos = {vocab[t] for t in _END_TOKENS if t in vocab}
        if isinstance(tokenizer.eos_token_id, int):
            eos.add(tokenizer.eos_token_id)
        loaded = Loaded(model=None, tokenizer=tokenizer, eos_ids=frozenset(eos), max_positions=max_positions,
                        info={"name": name, "origin": "VeRL rollout server", "vocab_size": len(tokenizer)})
        self.engine = _ServerEngine(server, loaded, sampling, request_id, response_length)  # type: ignore[assignment]

    @property
    def logprobs_returned(self) -> bool:
        return bool(self.engine.logprobs_returned)  # type: ignore[attr-defined]


# ---- (c) the agent loop ------------------------------------------------------------------------------
@register(AGENT_NAME)
class PalaestraAgentLoop(AgentLoopBase):
    """VeRL's agent loop over one Palaestra rollout (see the module docstring). Options come from the agent
    loop config entry (``agent_loop_config_path``; hydra passes its keys here): ``agent`` and ``max_steps``
    as for ``palaestra.collect``, ``placement`` of the environments, ``max_tokens`` per turn (default:
    VeRL's ``response_length``), ``resample`` attempts for a failed rollout, ``rollout_deadline_s``, and
    ``tool_choice`` (one value or a per-turn list; ``required`` needs a server that constrains decoding,
    such as ``PalaestraTokenServer``)."""

    def __init__(self, *args: Any, agent: str = "tool", max_steps: int = 4, placement: str = "direct",
                 max_tokens: int | None = None, resample: int = 2, rollout_deadline_s: float = 600.0,
                 tool_choice: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if resample < 0 or max_steps < 1:
            raise ConfigError(f"resample={resample} must be >= 0 and max_steps={max_steps} >= 1")
        self.agent, self.max_steps, self.placement = agent, max_steps, placement
        self.max_tokens, self.resample, self.rollout_deadline_s = max_tokens, resample, rollout_deadline_s
        # hydra hands a list over as a ListConfig: anything iterable but a string is a schedule
        schedule = [] if tool_choice is None else [tool_choice] if isinstance(tool_choice, str) else list(tool_choice)
        self.tool_choice: list[Any] = schedule
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        task = task_of(kwargs.get("extra_info"))
        failures: list[str] = []
        for _ in range(1 + self.resample):
            policy, rollout = await self._rollout(task, dict(sampling_params))
            sample, why = _trainable(rollout)
            if sample is not None:
                return self._output(rollout, sample, policy)
            failures.append(why)
        kind: FailureKind = next((cast(FailureKind, f) for f in failures if f in get_args(FailureKind)), "agent")
        raise InfraError(kind, f"task {task.id!r}: no trainable rollout in {len(failures)} attempt(s) "
                               f"({', '.join(failures)})",
                         hint="a failed rollout is never scored 0; see the environment's and the server's logs")

    async def _rollout(self, task: Task, sampling: dict[str, Any]) -> tuple[VerlServerPolicy, Rollout]:
        request_id = uuid.uuid4().hex  # VeRL's sticky session: every turn of one rollout on one server
        policy = VerlServerPolicy(self.server_manager, self.tokenizer, sampling, request_id=request_id,
                                  max_positions=self.prompt_length + self.response_length,
                                  response_length=self.response_length)
        asked: dict[str, Any] = {"max_tokens": self.max_tokens or self.response_length}
        for key in ("temperature", "top_p"):  # recorded in the rollout; VeRL's server samples with them
            if isinstance(sampling.get(key), (int, float)):
                asked[key] = float(sampling[key])
        spec = JobSpec.model_validate({"tasks": [task], "group_size": 1, "sampling": asked, "agent": self.agent,
                                       "max_steps": self.max_steps, "placement": self.placement,
                                       "rollout_deadline_s": self.rollout_deadline_s, "max_groups_in_flight": 1,
                                       "max_buffered_groups": 2})
        service = _service()
        backend: Any = ContinuationBackend(policy)
        if self.tool_choice:  # a per-turn schedule (["required", "none"]): needs a server that constrains
            backend = TurnToolChoice(backend, self.tool_choice)
        job = await service.submit(spec, backend=backend)
        try:
            group = await job.next_group(timeout=self.rollout_deadline_s + 60)
        finally:
            await service.forget(job.id)
        if group is None or not group.rollouts:
            raise InfraError("timeout", f"task {task.id!r}: the rollout did not come back",
                             hint="raise rollout_deadline_s")
        return policy, group.rollouts[0]

    def _output(self, rollout: Rollout, sample: TokenSample, policy: VerlServerPolicy) -> AgentLoopOutput:
        n = self.response_length
        calls = rollout.trajectory.model_calls
        logprobs = list(sample.completion_logprobs or []) if policy.logprobs_returned else None
        extra = {"palaestra_rollout_id": rollout.rollout_id, "palaestra_task_id": rollout.task_id,
                 "palaestra_request_id": policy.engine.request_id,  # type: ignore[attr-defined]
                 "palaestra_model_calls": len(calls), "palaestra_tool_calls": len(rollout.trajectory.tool_calls),
                 "palaestra_truncated": len(sample.completion_ids) > n,
                 "turn_scores": [], "tool_rewards": [],
                 "reward_extra_info": {"palaestra_passed": rollout.verdict is not None and rollout.verdict.is_pass()}}
        return AgentLoopOutput(prompt_ids=list(sample.prompt_ids), response_ids=list(sample.completion_ids[:n]),
                               response_mask=list(sample.completion_mask[:n]),
                               response_logprobs=logprobs[:n] if logprobs is not None else None,
                               reward_score=float(rollout.reward) if rollout.reward is not None else None,
                               num_turns=len(rollout.trajectory.messages), metrics=AgentLoopMetrics(),
                               extra_fields=extra)


def _trainable(rollout: Rollout) -> tuple[TokenSample | None, str]:
    """The rollout's one training sequence, or why it has none (a failure kind, ``drift``, ...)."""
    if rollout.outcome.status != "scored" or rollout.reward is None:
        return None, str(rollout.outcome.kind or rollout.outcome.status)
    result = build_samples(rollout, "drop")
    if result.skipped or len(result.samples) != 1:
        return None, "drift" if result.drifts else "untrainable"
    return result.samples[0], ""


# ---- VeRL's server interface over Palaestra's CPU engine ---------------------------------------------
class PalaestraTokenServer(LLMServerClient):
    """VeRL's ``LLMServerClient`` (token ids in, ``TokenOutput`` out) answered by Palaestra's local engine
    instead of vLLM servers behind a Ray load balancer: VeRL's agent-loop worker runs on a CPU with it
    (tests, smoke runs). ``calls`` keeps every request's prompt ids, sampled ids and logprobs: the
    backend's side of the token-exactness check."""

    accepts_constraints = True  # the local engine can constrain decoding to tool calls

    def __init__(self, engine: Any, *, seed: int = 0) -> None:
        super().__init__(OmegaConf.create({}))  # no load balancer: one engine
        self.engine, self.seed = engine, seed
        self.calls: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       constraint: Any = None, **_: Any) -> TokenOutput:
        sp = sampling_params
        for key in ("top_k", "repetition_penalty"):
            if sp.get(key) not in (None, -1, 0, 1.0):
                raise ModelError(f"the local engine cannot honour {key}={sp[key]!r}", status=400)
        params = Params(max_new_tokens=int(sp.get("max_tokens") or 256), temperature=float(sp.get("temperature", 1.0)),
                        top_p=float(sp.get("top_p", 1.0)), seed=self.seed + len(self.calls),
                        stop=tuple(sp.get("stop") or ()))
        call = {"request_id": request_id, "prompt_ids": list(prompt_ids)}
        self.calls.append(call)
        gen: Generation = await asyncio.wrap_future(self.engine.submit(list(prompt_ids), params, constraint))
        call["token_ids"], call["logprobs"] = list(gen.token_ids), list(gen.logprobs)
        return TokenOutput(token_ids=list(gen.token_ids), log_probs=list(gen.logprobs) if sp.get("logprobs") else None,
                           stop_reason="completed")
