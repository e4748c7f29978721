"""Run an Aviary environment (the ``fhaviary`` package, import name ``aviary``) as a Palaestra environment.

Aviary's contract: ``reset()`` returns the first observations and the episode's tools, ``step(action)``
takes a ``ToolRequestMessage`` and returns ``(observations, reward, done, truncated)``. Here:

- ``seed`` builds one Aviary environment per Palaestra session and resets it; the reset observations
  follow the task's own prompt (they usually *are* the prompt), and the tools it returns are the
  session's tools, with their JSON schemas (unknown fields refused);
- every Palaestra tool call is one ``step`` with a ``ToolRequestMessage`` holding that single call; the
  tool answers the tool response's content with the step's reward and done flag;
- ``verify`` returns the episode's reward. Aviary's ``step`` reward is the reward *of that step*
  (Aviary's agents sum them into the return), so the default ``reward_mode`` is ``sum``; ``last`` and
  ``max`` are there for environments that report a running score. The episode passes when it is done
  and the reward reaches ``pass_threshold``. Nothing is added for a final text answer: Aviary rewards
  only what its tools saw.

Failures: an exception from Aviary's reset, from step outside the tools, or a step past ``timeout_s``
is ``failed(environment)``, never a reward of 0. An exception raised *inside* one of the environment's
tool functions is the tool answering the model (a ``ToolError``), as with Palaestra's own tools.

Selecting one: ``--env aviary:<module:Class>`` (an Aviary ``Environment`` subclass, a ``TaskDataset``
subclass, or an ``@fenv.start()`` builder) or ``--env aviary:<name>`` (a name in Aviary's task-dataset
or environment registry, e.g. ``dummy``). Task rows say which episode: ``metadata.aviary`` may hold
``kwargs`` (constructor arguments), ``task`` (``from_task`` text) or ``index`` (a dataset item);
``metadata.reference_calls`` (``[{"name", "arguments"}]``) is the scripted replay the oracle plays.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import re
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

from palaestra.adapters.common import check_arguments, import_object
from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError, EnvironmentFailure, InvalidTask, ToolError, UnknownTool
from palaestra.core.records import Reference, Task, ToolCall, Trajectory, Verdict
from palaestra.envs.registry import register_alias

# Our own errors pass through the adapter's wrapping untouched (they already say whose fault it is).
PalaestraErrors = (EnvironmentFailure, ConfigError, InvalidTask)
INSTALL_HINT = "install Aviary: pip install 'palaestra[aviary]' (the `fhaviary` package; Python >= 3.11)"


def _require_aviary() -> None:
    if importlib.util.find_spec("aviary") is None or importlib.util.find_spec("aviary.core") is None:
        raise ConfigError("Aviary is not installed", hint=INSTALL_HINT)


def resolve_target(target: str) -> Any:
    """``module:Name`` or a registered Aviary name → the Aviary class (or ``fenv`` builder) it names.
    A registered name is looked up in the task-dataset registry first: a dataset knows its tasks."""
    _require_aviary()
    if ":" in target:
        return import_object(target, "Aviary environment")
    from aviary.env import ENV_REGISTRY, TASK_DATASET_REGISTRY

    entry = TASK_DATASET_REGISTRY.get(target) or ENV_REGISTRY.get(target)
    if entry is None:
        known = sorted(set(TASK_DATASET_REGISTRY) | set(ENV_REGISTRY))
        raise ConfigError(f"no Aviary environment or task dataset named '{target}'",
                          hint=f"registered: {', '.join(known)}; or aviary:module:Class")
    try:
        return getattr(importlib.import_module(entry[0]), entry[1])
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"Aviary '{target}' ({entry[0]}.{entry[1]}) cannot be imported: {exc}",
                          hint="install the Aviary package that provides it (e.g. aviary.gsm8k)") from None


def _kind(obj: Any) -> str:
    from aviary.env import Environment as AviaryEnv
    from aviary.env import TaskDataset

    if inspect.isclass(obj) and issubclass(obj, TaskDataset):
        return "dataset"
    if (inspect.isclass(obj) and issubclass(obj, AviaryEnv)) or type(obj).__name__ == "EnvironmentBuilder":
        return "environment"
    raise ConfigError(f"{obj!r} is not an Aviary Environment, TaskDataset or @fenv.start() builder")


def tool_schema(tool: Any) -> dict[str, Any]:
    """An Aviary ``Tool`` as an OpenAI function schema; fields beyond its parameters are refused (Aviary
    would otherwise crash calling the function with an unexpected keyword)."""
    info = tool.info
    params = info.parameters.model_dump(exclude_none=True) if info.parameters is not None else {}
    params = {"type": "object", "properties": {}, "required": [], **params}
    for prop in params["properties"].values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    params.setdefault("additionalProperties", False)
    return {"type": "function", "function": {"name": info.name, "description": info.description,
                                             "parameters": params}}


def _message(msg: Any) -> dict[str, Any]:
    content = msg.content
    return {"role": msg.role if msg.role in ("user", "system", "assistant") else "user",
            "content": content if content is not None else ""}


@dataclass
class AviaryState:
    task: Task
    env: Any
    tools: dict[str, Any]
    schemas: list[dict[str, Any]]
    tool_codes: set[Any]
    rewards: list[float] = field(default_factory=list)
    done: bool = False
    truncated: bool = False
    broken: str | None = None


class AviaryEnvironment(Environment):
    """An Aviary environment behind Palaestra's session API. Made by ``environment_class`` for
    ``--env aviary:...``; subclass and set ``aviary_target`` to fix one in code."""

    mechanism = "multi-turn"
    aviary_target: ClassVar[str] = ""
    dataset_kwargs: ClassVar[dict[str, Any]] = {}
    reward_mode: ClassVar[str] = "sum"  # sum | last | max of the step rewards
    require_done: ClassVar[bool] = True
    pass_threshold: ClassVar[float] = 1.0
    timeout_s: ClassVar[float] = 300.0
    example_count: ClassVar[int] = 3  # tasks drawn from a dataset of unknown length

    def __init__(self) -> None:
        self._source: Any = None
        self._dataset: Any = None
        self._seen: dict[int, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}  # id(task) → tools, obs
        self._default_tools: list[dict[str, Any]] | None = None

    # ---- the Aviary side -----------------------------------------------------------------------
    def source(self) -> Any:
        if self._source is None:
            if not self.aviary_target:
                raise ConfigError(f"Aviary environment '{self.name}' names no target",
                                  hint="select it as aviary:module:Class or set aviary_target")
            self._source = resolve_target(self.aviary_target)
            _kind(self._source)
        return self._source

    def dataset(self) -> Any:
        if self._dataset is None:
            try:
                self._dataset = self.source()(**self.dataset_kwargs)
            except Exception as exc:
                raise EnvironmentFailure(f"Aviary dataset {self.aviary_target}: {type(exc).__name__}: {exc}") from exc
        return self._dataset

    def _spec(self, task: Task) -> dict[str, Any]:
        spec = task.metadata.get("aviary") or {}
        if not isinstance(spec, dict) or set(spec) - {"kwargs", "task", "index"}:
            raise InvalidTask(f"task '{task.id}': metadata.aviary must be an object of kwargs, task or index")
        if "kwargs" in spec and not isinstance(spec["kwargs"], dict):
            raise InvalidTask(f"task '{task.id}': metadata.aviary.kwargs must be an object")
        if "index" in spec and not isinstance(spec["index"], int):
            raise InvalidTask(f"task '{task.id}': metadata.aviary.index must be an integer")
        return spec

    def check_task(self, task: Task) -> None:
        self._spec(task)
        calls = task.metadata.get("reference_calls")
        if calls is not None and not (isinstance(calls, list) and all(
                isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls)):
            raise InvalidTask(f"task '{task.id}': metadata.reference_calls must be a list of {{name, arguments}}")

    def make_env(self, task: Task) -> Any:
        """A fresh Aviary environment for the task's episode."""
        spec, source = self._spec(task), self.source()
        try:
            if _kind(source) == "dataset":
                data = self.dataset()
                return data.get_new_env_by_idx(spec["index"]) if "index" in spec else data.get_new_env()
            if "task" in spec:
                return source.from_task(spec["task"])
            return source(**spec.get("kwargs", {}))
        except PalaestraErrors:
            raise
        except Exception as exc:
            raise EnvironmentFailure(f"building Aviary environment {self.aviary_target} for '{task.id}': "
                                     f"{type(exc).__name__}: {exc}") from exc

    async def _bounded(self, what: str, coro: Any) -> Any:
        try:
            return await asyncio.wait_for(coro, self.timeout_s)
        except TimeoutError:
            raise EnvironmentFailure(f"Aviary {what} took longer than {self.timeout_s:g}s") from None

    # ---- tasks, prompt and tools ---------------------------------------------------------------
    def examples(self) -> list[Task]:
        """A finite dataset: one task per item; a dataset of unknown length: ``example_count`` draws; an
        environment class: one task with its default arguments. None carries a reference."""
        source = self.source()
        if _kind(source) == "dataset":
            try:
                n = len(self.dataset())
            except TypeError:
                return [Task(id=f"{self.name}-{i}", env=self.name) for i in range(self.example_count)]
            return [Task(id=f"{self.name}-{i}", env=self.name, metadata={"aviary": {"index": i}}) for i in range(n)]
        return [Task(id=f"{self.name}-0", env=self.name)]

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        messages = super().prompt(task) if task.input else []
        seen = self._seen.get(id(task))
        if seen is not None:
            messages.extend(seen[1])
        return messages

    def tool_schemas(self, task: Task | None = None) -> list[dict[str, Any]]:
        seen = self._seen.get(id(task)) if task is not None else None
        if seen is not None:
            return seen[0]
        if task is not None or self._default_tools is None:  # no live episode: reset one to read its tools
            probe = task or (self.examples() or [Task(id="probe", env=self.name)])[0]
            box: dict[str, Any] = {}

            def read() -> None:
                async def go() -> None:
                    state = await self.seed(probe)
                    box["tools"] = state.schemas
                    await self.close(state)

                try:
                    asyncio.run(go())
                except BaseException as exc:
                    box["error"] = exc

            thread = threading.Thread(target=read, daemon=True)  # callers may be inside a running loop
            thread.start()
            thread.join()
            if "error" in box:
                raise box["error"]
            if task is not None:
                return list(box["tools"])
            self._default_tools = box["tools"]
        return self._default_tools

    # ---- session -------------------------------------------------------------------------------
    async def seed(self, task: Task) -> AviaryState:
        env = self.make_env(task)
        try:
            observations, tools = await self._bounded("reset", env.reset())
        except PalaestraErrors:
            raise
        except Exception as exc:
            raise EnvironmentFailure(f"Aviary reset of '{task.id}' failed: {type(exc).__name__}: {exc}") from exc
        by_name = {t.info.name: t for t in tools}
        codes = {getattr(inspect.unwrap(t._tool_fn), "__code__", None) for t in tools}
        state = AviaryState(task=task, env=env, tools=by_name, schemas=[tool_schema(t) for t in tools],
                            tool_codes=codes - {None})
        # host.open() reads tool_schemas(task) and prompt(task) right after seed() returns, with no await
        self._seen[id(task)] = (state.schemas, [_message(m) for m in observations or []])
        return state

    def _raised_in_tool(self, state: AviaryState, exc: BaseException) -> bool:
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code in state.tool_codes:
                return True
            tb = tb.tb_next
        return False

    async def dynamic_tool(self, state: AviaryState, name: str, arguments: Any) -> Any:
        from aviary.core import ToolCall as AviaryCall
        from aviary.core import ToolRequestMessage

        tool = state.tools.get(name)
        if tool is None:
            raise UnknownTool(f"unknown tool '{name}' in environment '{self.name}'",
                              hint=f"available tools: {', '.join(sorted(state.tools)) or '(none)'}")
        args = check_arguments(state.schemas[list(state.tools).index(name)]["function"]["parameters"],
                               arguments, name)
        if state.broken:
            raise EnvironmentFailure(state.broken)
        if state.done:
            raise ToolError("the episode is over (done)", hint="stop acting and give your final answer")
        action = ToolRequestMessage(tool_calls=[AviaryCall.from_name(name, **args)])
        try:
            observations, reward, done, truncated = await self._bounded("step", state.env.step(action))
        except EnvironmentFailure as exc:
            state.broken = exc.message
            raise
        except Exception as exc:
            if self._raised_in_tool(state, exc):
                raise ToolError(f"{type(exc).__name__}: {exc}", hint="read the error and try again") from None
            state.broken = f"Aviary step of '{state.task.id}' failed: {type(exc).__name__}: {exc}"
            raise EnvironmentFailure(state.broken) from exc
        state.rewards.append(float(reward or 0.0))
        state.done, state.truncated = bool(done), bool(truncated)
        content = [str(m.content) for m in observations if getattr(m, "tool_call_id", None) is not None]
        others = [_message(m) for m in observations if getattr(m, "tool_call_id", None) is None]
        out: dict[str, Any] = {"content": "\n".join(content), "reward": float(reward or 0.0), "done": state.done}
        if others:
            out["observations"] = [m["content"] for m in others]
        if state.truncated:
            out["truncated"] = True
        return out

    async def close(self, state: AviaryState) -> None:
        self._seen.pop(id(state.task), None)
        try:
            await self._bounded("close", state.env.close())
        except Exception:  # a failed cleanup must not turn a finished episode's verdict into a failure
            return

    # ---- scoring -------------------------------------------------------------------------------
    def score(self, rewards: list[float]) -> float:
        if self.reward_mode not in ("sum", "last", "max"):
            raise ConfigError(f"reward_mode '{self.reward_mode}' of '{self.name}'", hint="use sum, last or max")
        if not rewards:
            return 0.0
        if self.reward_mode == "last":
            return rewards[-1]
        if self.reward_mode == "max":
            return max(rewards)
        return float(sum(rewards))

    def verify(self, state: AviaryState, trajectory: Trajectory) -> Verdict:
        if state.broken:
            raise EnvironmentFailure(state.broken, hint="the Aviary environment failed during the episode")
        reward = self.score(state.rewards)
        passed = (state.done or not self.require_done) and reward >= self.pass_threshold
        return Verdict(reward=reward, passed=passed,
                       components={"return": float(sum(state.rewards)), "done": float(state.done)},
                       metadata={"steps": len(state.rewards), "rewards": state.rewards[-50:],
                                 "truncated": state.truncated})

    def reference(self, task: Task) -> Reference | None:
        """The scripted replay of a task row (``metadata.reference_calls``): Aviary has no solution API."""
        calls = task.metadata.get("reference_calls")
        if not isinstance(calls, list):
            return None
        return Reference(tool_calls=[ToolCall(name=c["name"], arguments=dict(c.get("arguments") or {}))
                                     for c in calls], final_answer=str(task.metadata.get("reference_answer", "done")))


_CLASSES: dict[str, type[AviaryEnvironment]] = {}
_LOCK = threading.Lock()


def environment_class(target: str) -> type[AviaryEnvironment]:
    """The Palaestra environment class for ``aviary:<target>`` (one per target, so every lookup of a
    spec gets the same class); its name is ``aviary-`` and the target's last part, lower-cased."""
    with _LOCK:
        cls = _CLASSES.get(target)
        if cls is None:
            _kind(resolve_target(target))  # refuse a wrong target at selection, not at the first rollout
            short = re.sub(r"[^a-z0-9]+", "-", target.rpartition(":")[2].rpartition(".")[2].lower()).strip("-")
            cls = type(f"Aviary_{short}", (AviaryEnvironment,),
                       {"name": f"aviary-{short}", "aviary_target": target, "__module__": __name__,
                        "description": f"Aviary environment {target}"})
            _CLASSES[target] = cls
    register_alias(cls.name, f"aviary:{target}")  # task rows name it by its short name
    return cls
