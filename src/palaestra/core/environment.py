"""The environment authoring API: one Python class holds the tasks' tools, per-session state and the
verifier. The framework turns it into a server (in-process, local process or on a cluster)."""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from palaestra.core.errors import InvalidTask, UnknownTool
from palaestra.core.records import Reference, Rollout, Task, Trajectory, Verdict
from palaestra.core.tools import ToolSpec, build_tool_spec, is_tool

T = TypeVar("T")


# What sync methods return most (a verdict, a state dict, None): never awaitable, and told apart by type
# alone, before ``inspect.isawaitable`` (whose last check is an ABC's, for every value that is not).
_PLAIN = frozenset((dict, list, str, int, float, bool, type(None), Verdict))


async def maybe_await(value: T | Awaitable[T]) -> T:
    """Let authors write sync or async methods: await only what needs awaiting."""
    if type(value) not in _PLAIN and inspect.isawaitable(value):
        return await value
    return value  # type: ignore[return-value]


class Environment:
    """Subclass this. Override ``seed``, ``verify``, optionally ``reference`` and ``close``; mark tools
    with ``@tool``. Methods may be sync or async. Bundled example tasks live in ``data/*.jsonl`` next to
    the module (or wherever ``data_dir`` points)."""

    name: ClassVar[str] = ""
    version: ClassVar[str] = "0.1"
    description: ClassVar[str] = ""
    domain: ClassVar[str] = "general"
    mechanism: ClassVar[str] = "single-turn"
    data_dir: ClassVar[str | Path | None] = None
    system_prompt: ClassVar[str | None] = None
    # How many live sessions a host of this environment keeps (each placement honours it); an environment
    # whose sessions hold heavy state (containers, browsers) declares a lower cap.
    max_sessions: ClassVar[int] = 10_000

    _tool_specs: ClassVar[dict[str, ToolSpec]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.name:
            cls.name = cls.__name__.lower()
        specs: dict[str, ToolSpec] = {}
        for klass in reversed(cls.__mro__):
            for attr, fn in vars(klass).items():
                if is_tool(fn):
                    spec = build_tool_spec(cls, attr, fn)
                    specs[spec.name] = spec
        cls._tool_specs = specs

    # ---- to override -------------------------------------------------------------------------
    def seed(self, task: Task) -> Any:
        """Per-session state from the task. The default state is the task itself."""
        return task

    def verify(self, state: Any, trajectory: Trajectory) -> Verdict | Awaitable[Verdict]:
        raise NotImplementedError(f"{type(self).__name__} must implement verify(state, trajectory)")

    def reference(self, task: Task) -> Reference | None:
        """The gold tool calls and final answer, when known. Used by the oracle and ``env check``."""
        return None

    def dynamic_tool(self, state: Any, name: str, arguments: Any) -> Any:
        """Tools not known until a task arrives (e.g. ``tool_call``'s per-task tools): called for a name
        that is no ``@tool``. Validate ``arguments`` yourself; raise BadArguments or ToolError to answer."""
        raise UnknownTool(
            f"unknown tool '{name}' in environment '{self.name}'",
            hint=f"available tools: {', '.join(sorted(self._tool_specs)) or '(none)'}",
        )

    def close(self, state: Any) -> Any:
        """Free what ``seed`` allocated (files, connections, sandboxes)."""
        return None

    def metrics(self, rollouts: list[Rollout]) -> dict[str, Any]:
        """Extra run metrics of this environment (e.g. a per-difficulty pass rate), from its rollouts.

        Called when metrics are computed; the result lands in ``metrics.json`` under ``env_metrics``."""
        return {}

    def preflight(self, tasks: list[Task]) -> dict[str, Any]:
        """Once, before a run's first rollout, with all of its tasks of this environment: raise ConfigError
        when grading them cannot work (e.g. no judge model configured), so the run refuses to start
        instead of failing every rollout. What it returns (e.g. which judge grades) goes into run.json
        under ``envs.<name>``."""
        return {}

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        """The messages the model sees first. Ground truth in ``task.metadata`` never appears here."""
        messages = task.messages()
        if self.system_prompt and not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    # ---- framework ---------------------------------------------------------------------------
    def tool_specs(self) -> dict[str, ToolSpec]:
        return self._tool_specs

    def tool_schemas(self, task: Task | None = None) -> list[dict[str, Any]]:
        return [spec.schema() for spec in self._tool_specs.values()]

    async def call_tool(self, state: Any, name: str, arguments: Any) -> Any:
        spec = self._tool_specs.get(name)
        if spec is None:
            return await maybe_await(self.dynamic_tool(state, name, arguments))
        args = spec.validate(arguments)
        method: Callable[..., Any] = getattr(self, spec.method_name)
        return await maybe_await(method(state, **args))

    def check_task(self, task: Task) -> None:
        """Raise InvalidTask if a row lacks what this environment needs. Override to add checks."""
        return None

    @classmethod
    def resolved_data_dir(cls) -> Path:
        if cls.data_dir is not None:
            return Path(cls.data_dir)
        return Path(inspect.getfile(cls)).resolve().parent / "data"

    def examples(self) -> list[Task]:
        """The bundled example tasks, in file order."""
        tasks: list[Task] = []
        data = self.resolved_data_dir()
        if not data.is_dir():
            return tasks
        for path in sorted(data.glob("*.jsonl")):
            with path.open(encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise InvalidTask(
                            f"{path.name}:{lineno}: not valid JSON ({exc.msg})",
                            hint="fix the bundled data file",
                        ) from None
                    row.setdefault("env", self.name)
                    tasks.append(Task.model_validate(row))
        return tasks

    @classmethod
    def verifier_hash(cls) -> str:
        """A short hash of the verifier's source, recorded in run.json so a changed verifier is visible.

        For an environment that is a package (``envs/<name>/env.py`` beside helpers such as an answer
        extractor), every module of the package counts: a change to any of them can change scores."""
        module = inspect.getmodule(cls)
        digest = hashlib.sha256()
        try:
            path = Path(inspect.getfile(cls)).resolve()
            files = [path]
            if module is not None and module.__package__ and (path.parent / "__init__.py").is_file():
                files = sorted(path.parent.glob("*.py"))
            for f in files:
                digest.update(f.name.encode() + b"\0" + f.read_bytes())
        except (OSError, TypeError):
            digest.update((cls.__qualname__ + cls.version).encode())
        return digest.hexdigest()[:16]

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description or (inspect.getdoc(self) or "").split("\n\n")[0],
            "domain": self.domain,
            "mechanism": self.mechanism,
            "tools": self.tool_schemas(),
            "verifier_hash": self.verifier_hash(),
        }
