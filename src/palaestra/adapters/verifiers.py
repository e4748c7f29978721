"""Load an environment of the ``verifiers`` library (Prime Intellect) as a Palaestra environment.

A verifiers environment (its classic API: ``vf.SingleTurnEnv``, ``vf.ToolEnv``, anything built from a
dataset and a ``vf.Rubric``) brings three things, and each maps onto ours:

- its dataset (the eval split, else train): every row becomes a task; the row's ``prompt`` messages
  are the input and the rest of the row (``answer``, ``info``, ``task``, ...) stays verifier-only in
  ``metadata.vf_row``;
- its tools (a ``ToolEnv``'s Python functions): the same names and JSON schemas, called in-process;
- its rubric: our trajectory becomes the rubric's ``prompt`` / ``completion`` / ``state``, and the
  rubric's weighted reward functions give the reward (their individual scores are the components).

The environment is built by the subclass: ``verifiers_env = "module:load_environment"`` (called with
``verifiers_args``) or by overriding ``load_verifiers_env()``. verifiers is imported only then.
Mirrored as verifiers runs them: the reference is the answer column (or, for verifiers' reasoning-gym
integration whose column holds an index, that entry's answer) written in the parser's format; the rubric
sees only the first ``max_turns`` model turns, the last one unanswered, as verifiers stops there; the
verdict carries the rubric's weights. Supported: verifiers' classic API (0.1.x-0.3.x, where 0.3 keeps it
as ``verifiers.legacy``); its v1 API (the whole of 0.4) is ``verifiers_v1.py``'s, and handing a v1
environment to this class is refused with an error that names it. Not supported:
environments whose ``env_response`` answers free text (games driven by the environment's
replies), tools that need injected rollout state (``StatefulToolEnv``), group-level reward functions.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from palaestra.adapters.common import check_arguments, import_object
from palaestra.core.environment import Environment, maybe_await
from palaestra.core.errors import ConfigError, InvalidTask, ToolError, UnknownTool, VerifierError
from palaestra.core.records import Reference, Task, Trajectory, Verdict

INSTALL_HINT = "install verifiers: pip install 'palaestra[verifiers]'"
V1_HINT = ("a v1 taskset (verifiers 0.4, or verifiers.v1 in 0.3) runs through "
           "palaestra.adapters.verifiers_v1.VerifiersV1Environment (taskset = its id); this class is the classic API")
# One built verifiers environment per adapter class: building can be costly (datasets are mapped) and
# ``env check`` makes more than one instance of the class.
_BUILT: dict[type, Any] = {}


@dataclass
class VfSession:
    task: Task


def _plain(value: Any) -> Any:
    """Dataset values as plain JSON (task rows are written to disk and sent over the wire)."""
    return json.loads(json.dumps(value, default=str))


def _tool_def(tool: Any) -> dict[str, Any]:
    """A verifiers tool definition (``vf.Tool`` or an OpenAI function tool) → an OpenAI function tool."""
    if isinstance(tool, dict) and tool.get("type") == "function":
        return dict(tool)
    get = tool.get if isinstance(tool, dict) else lambda k, d=None: getattr(tool, k, d)
    params = dict(get("parameters") or {"type": "object", "properties": {}})
    return {"type": "function", "function": {"name": get("name"), "description": get("description") or "",
                                             "parameters": params}}


class VerifiersEnvironment(Environment):
    """A verifiers environment behind Palaestra's session API. Subclass and say how to build it."""

    domain = "verifiers"
    verifiers_env: ClassVar[str | None] = None
    verifiers_args: ClassVar[dict[str, Any]] = {}
    split: ClassVar[str] = "eval"  # eval (falls back to train, as verifiers does) | train
    limit: ClassVar[int | None] = None

    def __init__(self) -> None:
        self._vf: Any = None
        self._tools: list[dict[str, Any]] | None = None

    # ---- the wrapped environment ---------------------------------------------------------------
    def load_verifiers_env(self) -> Any:
        """Build the verifiers environment. Default: call (or take) ``verifiers_env``."""
        if not self.verifiers_env:
            raise ConfigError(f"verifiers environment '{self.name}' does not say what to load",
                              hint="set verifiers_env = 'module:load_environment' or override load_verifiers_env()")
        try:
            import verifiers  # noqa: F401
        except ImportError as exc:
            raise ConfigError(f"verifiers is not installed ({exc})", hint=INSTALL_HINT) from None
        if importlib.util.find_spec("verifiers.legacy") is None and importlib.util.find_spec("verifiers.envs") is None:
            raise ConfigError("the installed verifiers has only its v1 API (0.4 and later)", hint=V1_HINT)
        target = import_object(self.verifiers_env, "verifiers environment")
        return target(**self.verifiers_args) if callable(target) and not hasattr(target, "rubric") else target

    @property
    def vf_env(self) -> Any:
        if self._vf is None:
            env = _BUILT.get(type(self))
            if env is None:
                env = self.load_verifiers_env()
                if any(c.__module__.startswith("verifiers.v1") for c in type(env).__mro__):
                    raise ConfigError(f"'{self.name}': {type(env).__name__} is a verifiers v1 environment, which "
                                      "the classic adapter does not run", hint=V1_HINT)
                if not hasattr(env, "rubric"):
                    raise ConfigError(f"'{self.name}': {type(env).__name__} is not a verifiers environment (no "
                                      "rubric)", hint="verifiers_env must name a vf.Environment or a function "
                                                      "returning one")
                _BUILT[type(self)] = env
            self._vf = env
        return self._vf

    # ---- tasks ---------------------------------------------------------------------------------
    def dataset(self) -> Any:
        env = self.vf_env
        n = self.limit or -1
        if self.split == "train":
            return env.get_dataset(n=n)
        return env.get_eval_dataset(n=n)

    def examples(self) -> list[Task]:
        tasks: list[Task] = []
        max_turns = int(getattr(self.vf_env, "max_turns", -1) or -1)
        for i, raw in enumerate(self.dataset()):
            row = _plain(dict(raw))
            prompt = row.pop("prompt", None)
            if prompt is None:
                raise ConfigError(f"'{self.name}': dataset row {i} has no prompt",
                                  hint="verifiers formats rows into a 'prompt' column; is this a vf dataset?")
            ident = row.get("example_id", i)
            meta: dict[str, Any] = {"vf_row": row, "answer": row.get("answer")}
            if max_turns > 0:  # verifiers' turn limit, stated so an agent can keep to it (the rubric does)
                meta["max_turns"] = max_turns
            tasks.append(Task(id=f"{self.name}-{ident}", env=self.name, input=prompt, metadata=meta,
                              tags=[str(row["task"])] if isinstance(row.get("task"), str) else []))
        return tasks

    def reference(self, task: Task) -> Reference | None:
        """The dataset's answer as the final answer, written the way the environment's parser reads it.

        Some published environments keep a key in the answer column rather than the answer: verifiers'
        reasoning-gym integration stores the row's index into its reasoning-gym dataset (``rg_dataset``),
        so the reference is that dataset entry's own answer, not the index."""
        answer = task.metadata.get("answer")
        if answer is None:
            return None
        text = str(answer)
        rg = getattr(self.vf_env, "rg_dataset", None)
        if rg is not None and text.strip().isdigit():
            entry = rg[int(text)]
            if entry.get("answer") is None:
                return None  # the dataset has no canonical answer: no reference rather than a wrong one
            text = str(entry["answer"])
        return Reference(final_answer=_formatted(getattr(self.vf_env, "parser", None), text))

    # ---- tools ---------------------------------------------------------------------------------
    def tool_schemas(self, task: Task | None = None) -> list[dict[str, Any]]:
        if self._tools is None:
            env = self.vf_env
            defs = getattr(env, "tool_defs", None) or getattr(env, "oai_tools", None) or []
            tools = [_tool_def(t) for t in defs]
            for t in tools:
                params = t["function"]["parameters"]
                params.setdefault("type", "object")
                params.setdefault("additionalProperties", False)
            self._tools = tools
        return self._tools

    def check_task(self, task: Task) -> None:
        """A verifiers rubric scores a completion of the row's prompt: a row without one cannot be run."""
        if not any(str(m.get("content") or "").strip() for m in task.messages()):
            raise InvalidTask(f"verifiers task '{task.id}' has an empty input",
                              hint="put the prompt in `input`")

    def seed(self, task: Task) -> VfSession:
        return VfSession(task)

    async def dynamic_tool(self, state: VfSession, name: str, arguments: Any) -> Any:
        tools = {t["function"]["name"]: t for t in self.tool_schemas()}
        fn = (getattr(self.vf_env, "tool_map", None) or {}).get(name)
        if name not in tools or fn is None:
            raise UnknownTool(f"unknown tool '{name}' in environment '{self.name}'",
                              hint=f"available tools: {', '.join(sorted(tools)) or '(none)'}")
        args = check_arguments(tools[name]["function"]["parameters"], arguments, name)
        try:
            result = await maybe_await(fn(**args))
        except Exception as exc:  # the tool's own error: the model reads it, as in verifiers' ToolEnv
            raise ToolError(f"{type(exc).__name__}: {exc}", hint="fix the arguments and call the tool again") from None
        return result if isinstance(result, (str, int, float, bool, list, dict)) or result is None else str(result)

    # ---- scoring -------------------------------------------------------------------------------
    def _completion(self, task: Task, trajectory: Trajectory) -> list[dict[str, Any]]:
        return completion_messages(task, trajectory, int(getattr(self.vf_env, "max_turns", -1) or -1))

    async def verify(self, state: VfSession, trajectory: Trajectory) -> Verdict:
        rubric = self.vf_env.rubric
        row = dict(state.task.metadata.get("vf_row") or {})
        prompt = state.task.messages()
        completion = self._completion(state.task, trajectory)
        params = inspect.signature(rubric.score_rollout).parameters
        if "prompt" in params:  # verifiers <= 0.1: score_rollout(prompt, completion, answer, state, ...)
            scored = await rubric.score_rollout(prompt=prompt, completion=completion, answer=row.get("answer", ""),
                                                state={"prompt": prompt, "completion": completion, **row},
                                                task=row.get("task", "default"), info=row.get("info") or {})
            reward, metrics = _field(scored, "reward"), _field(scored, "metrics")
        else:
            vf_state = _vf_state(row, prompt, completion)
            try:
                await rubric.score_rollout(vf_state)
            except AssertionError as exc:
                raise VerifierError(f"the rubric of '{self.name}' cannot score one rollout alone: {exc}",
                                    hint="group-level reward functions are not supported by this adapter") from None
            reward, metrics = vf_state.get("reward"), vf_state.get("metrics")
        if reward is None:
            raise VerifierError(f"the rubric of '{self.name}' gave no reward", hint="check its reward functions")
        threshold = float(getattr(self.vf_env, "pass_threshold", 1.0) or 1.0)
        components = {str(k): float(v) for k, v in (metrics or {}).items() if isinstance(v, (int, float))}
        return Verdict(reward=float(reward), passed=float(reward) >= threshold, components=components,
                       metadata={"weights": _weights(rubric)}, answer=trajectory.final_text() or None)


def completion_messages(task: Task, trajectory: Trajectory, max_turns: int) -> list[dict[str, Any]]:
    """What the model said after the prompt, as chat messages, ending with its final answer (shared by the
    classic and the v1 adapter: both versions of verifiers stop a rollout the same way)."""
    prompt_len = len(task.messages())
    messages = [dict(m) for m in trajectory.messages]
    start = prompt_len if len(messages) >= prompt_len and all(
        m.get("role") in ("system", "user", "developer") for m in messages[:prompt_len]) else 0
    while start < len(messages) and messages[start].get("role") in ("system", "user", "developer"):
        start += 1
    completion = [m for m in messages[start:] if m.get("role") in ("assistant", "tool", "user")]
    turns = [i for i, m in enumerate(completion) if m.get("role") == "assistant"]
    if max_turns > 0 and len(turns) >= max_turns:
        # verifiers stops after the max_turns-th model turn, before the environment answers it: the
        # rubric sees that turn last (its tool calls unanswered), never what an agent did afterwards.
        return completion[:turns[max_turns - 1] + 1]
    final = trajectory.final_text()
    last = completion[-1] if completion else None
    if final and not (last and last.get("role") == "assistant" and str(last.get("content") or "") == final):
        completion.append({"role": "assistant", "content": final})
    return completion

def _formatted(parser: Any, answer: str) -> str:
    """The answer in the parser's format (an ``XMLParser`` wants ``<answer>...</answer>``), kept only when
    the parser reads the answer back from it, else the bare answer."""
    fmt, parse = getattr(parser, "format", None), getattr(parser, "parse_answer", None)
    field = getattr(parser, "answer_field", None)
    if not (callable(fmt) and callable(parse) and isinstance(field, str)):
        return answer
    try:
        text = str(fmt(**{field: answer}))
        ok = str(parse([{"role": "assistant", "content": text}]) or "").strip() == answer.strip()
    except Exception:  # a parser that cannot format: the bare answer is still a fair reference
        return answer
    return text if ok else answer


def _weights(rubric: Any) -> dict[str, float]:
    """Each reward function's weight, as the rubric (or a RubricGroup of rubrics) combines them: the
    reward is their weighted sum, so the weights say how the components make it."""
    try:
        names, weights = rubric._get_reward_func_names(), rubric._get_reward_weights()
    except AttributeError:
        return {}
    return {str(n): float(w) for n, w in zip(names, weights, strict=False)}


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _vf_state(row: dict[str, Any], prompt: list[dict[str, Any]], completion: list[dict[str, Any]]) -> Any:
    """The rollout state verifiers' rubric reads (0.2/0.3 classic API), built as its ``init_state`` does."""
    from verifiers.types import State

    try:
        from verifiers.types import flatten_task_input
    except ImportError:
        flatten_task_input = None
    try:
        from verifiers.utils.message_utils import normalize_messages
    except ImportError:
        def normalize_messages(value: Any, **_: Any) -> Any:
            return value
    payload = {**row, "prompt": prompt}
    state = State(input=payload)
    state["task"] = flatten_task_input(payload) if flatten_task_input else row.get("task")
    state["prompt"] = normalize_messages(prompt, field_name="prompt")
    state["completion"] = normalize_messages(completion, field_name="completion")
    state.update({"trajectory": _steps(prompt, completion, normalize_messages), "is_completed": True,
                  "is_truncated": False, "reward": None, "metrics": None, "error": None, "tool_defs": [],
                  "stop_condition": "palaestra"})
    return state


def _steps(prompt: list[dict[str, Any]], completion: list[dict[str, Any]], normalize: Any) -> list[dict[str, Any]]:
    """One trajectory step per model turn (an assistant message and the tool results that answer it), as
    verifiers records them: its turn-counting metrics read ``state["trajectory"]``."""
    steps: list[dict[str, Any]] = []
    for i, message in enumerate(completion):
        if message.get("role") != "assistant":
            continue
        end = i + 1
        while end < len(completion) and completion[end].get("role") == "tool":
            end += 1
        steps.append({"prompt": normalize(prompt + completion[:i], field_name="prompt"),
                      "completion": normalize(completion[i:end], field_name="completion"), "response": None,
                      "tokens": None, "reward": None, "advantage": None, "is_truncated": False,
                      "trajectory_id": "palaestra", "extras": {}})
    return steps
