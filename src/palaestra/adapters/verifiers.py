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
Supported: verifiers' classic API (0.1.x-0.3.x, where 0.3 keeps it as ``verifiers.legacy``). Not
supported: environments whose ``env_response`` answers free text (games driven by the environment's
replies), tools that need injected rollout state (``StatefulToolEnv``), group-level reward functions.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from palaestra.adapters.common import check_arguments, import_object
from palaestra.core.environment import Environment, maybe_await
from palaestra.core.errors import ConfigError, InvalidTask, ToolError, UnknownTool, VerifierError
from palaestra.core.records import Reference, Task, Trajectory, Verdict

INSTALL_HINT = "install verifiers: pip install 'palaestra[verifiers]'"
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
        target = import_object(self.verifiers_env, "verifiers environment")
        return target(**self.verifiers_args) if callable(target) and not hasattr(target, "rubric") else target

    @property
    def vf_env(self) -> Any:
        if self._vf is None:
            env = _BUILT.get(type(self))
            if env is None:
                env = self.load_verifiers_env()
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
        for i, raw in enumerate(self.dataset()):
            row = _plain(dict(raw))
            prompt = row.pop("prompt", None)
            if prompt is None:
                raise ConfigError(f"'{self.name}': dataset row {i} has no prompt",
                                  hint="verifiers formats rows into a 'prompt' column; is this a vf dataset?")
            ident = row.get("example_id", i)
            tasks.append(Task(id=f"{self.name}-{ident}", env=self.name, input=prompt,
                              metadata={"vf_row": row, "answer": row.get("answer")},
                              tags=[str(row["task"])] if isinstance(row.get("task"), str) else []))
        return tasks

    def reference(self, task: Task) -> Reference | None:
        """The dataset's answer as the final answer: enough for rubrics that compare the answer."""
        answer = task.metadata.get("answer")
        return None if answer is None else Reference(final_answer=str(answer))

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
        """What the model said after the prompt, as chat messages, ending with its final answer."""
        prompt_len = len(task.messages())
        messages = [dict(m) for m in trajectory.messages]
        start = prompt_len if len(messages) >= prompt_len and all(
            m.get("role") in ("system", "user", "developer") for m in messages[:prompt_len]) else 0
        while start < len(messages) and messages[start].get("role") in ("system", "user", "developer"):
            start += 1
        completion = [m for m in messages[start:] if m.get("role") in ("assistant", "tool", "user")]
        final = trajectory.final_text()
        last = completion[-1] if completion else None
        if final and not (last and last.get("role") == "assistant" and str(last.get("content") or "") == final):
            completion.append({"role": "assistant", "content": final})
        return completion

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
                       answer=trajectory.final_text() or None)


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
