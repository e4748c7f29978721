"""The common flow of an in-process agent-SDK harness: serve the rollout's model on a loopback endpoint,
let the SDK's own loop run against it with the environment's tools as SDK tools, then rebuild the
trajectory from the calls the SDK made (as for the external CLIs), so what is recorded is what the SDK
sent, not what it says it sent.

Failures are typed as for the CLIs: a model error the SDK ended on is ``failed(model)``; an SDK that never
got a model answer is ``failed(agent)``; hitting the step limit is a scored rollout with
``stop_reason=max_steps``.
"""

from __future__ import annotations

import abc
import asyncio
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from palaestra.agents.base import ChatModel, ToolSurface
from palaestra.agents.external.transcript import rebuild_messages
from palaestra.agents.sdk.endpoint import LoopbackEndpoint
from palaestra.agents.tool_agent import render_tool_result
from palaestra.core.errors import AgentError, ConfigError, InfraError
from palaestra.core.records import Message, Task, Trajectory
from palaestra.server.model_proxy import Api
from palaestra.wire.env import SessionHandle


@dataclass
class SDKRun:
    """What one SDK run gets: the endpoint to point its client at, the task's messages split as SDKs want
    them, the tools, and the step bound."""

    endpoint: LoopbackEndpoint
    instructions: str
    messages: list[Message]
    tools: ToolSurface
    max_steps: int
    model: str = "palaestra"
    loop: asyncio.AbstractEventLoop | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    failure: InfraError | None = None  # the first infrastructure failure a tool call raised

    @property
    def prompt(self) -> str:
        """The user's words as one string, for SDKs whose ``run`` takes a task string."""
        return "\n\n".join(str(m.get("content") or "") for m in self.messages if m.get("role") == "user").strip()

    def tool_specs(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(name, description, JSON-schema parameters) of every environment tool."""
        out = []
        for schema in self.tools.schemas:
            fn = schema.get("function") or {}
            if fn.get("name"):
                out.append((str(fn["name"]), str(fn.get("description") or fn["name"]),
                            dict(fn.get("parameters") or {"type": "object", "properties": {}})))
        return out

    async def call_tool(self, name: str, arguments: Any, call_id: str | None = None) -> str:
        """Call an environment tool; errors come back as text the model reads (as with the tool agent).
        An infrastructure failure (the environment lost, a sandbox down) is kept: SDKs tend to turn a tool's
        exception into text for the model, and the rollout must fail with its kind instead."""
        try:
            return render_tool_result(await self.tools.call(name, arguments, call_id))
        except InfraError as exc:
            self.failure = self.failure or exc
            raise

    def call_tool_sync(self, name: str, arguments: Any, call_id: str | None = None) -> str:
        """The same from an SDK's worker thread (sync SDKs run off the event loop the tools live on)."""
        if self.loop is None:
            raise AgentError("call_tool_sync needs the run's event loop")
        future = asyncio.run_coroutine_threadsafe(self.call_tool(name, arguments, call_id), self.loop)
        return future.result()


class SDKAgent(abc.ABC):
    """An Agent whose loop is an installed SDK's. Subclasses set ``name``, ``dialect``, ``distribution``
    (its PyPI name), ``modules`` (what must import) and implement ``drive``."""

    name: str = ""
    dialect: Api = "chat"
    distribution: str = ""
    pinned: str = ""  # the version the [sdk] extra installs
    modules: tuple[str, ...] = ()
    extra: str = ""

    def __init__(self, *, max_steps: int = 16, model_name: str = "palaestra") -> None:
        self.max_steps = max_steps
        self.model_name = model_name

    @classmethod
    def installed_version(cls) -> str | None:
        try:
            return importlib.metadata.version(cls.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    @classmethod
    def available(cls) -> bool:
        import importlib.util

        return all(importlib.util.find_spec(m) is not None for m in cls.modules)

    @abc.abstractmethod
    async def drive(self, run: SDKRun) -> tuple[str | None, str]:
        """Run the SDK's loop to its end: (its final answer, stop reason: ``final`` or ``max_steps``)."""

    async def run(self, task: Task, session: SessionHandle, tools: ToolSurface, model: ChatModel,
                  sampling: dict[str, Any]) -> Trajectory:
        if not self.available():
            raise ConfigError(f"agent '{self.name}' needs the {self.distribution} package, which is not installed",
                              hint=f"pip install 'palaestra[{self.extra}]'")
        system = [str(m.get("content") or "") for m in session.messages if m.get("role") == "system"]
        rest = [dict(m) for m in session.messages if m.get("role") != "system"]
        endpoint = LoopbackEndpoint(model, sampling, call_limit=2 * self.max_steps + 4)
        async with endpoint:
            run = SDKRun(endpoint, "\n\n".join(system), rest, tools, self.max_steps, self.model_name,
                         asyncio.get_running_loop())
            error: BaseException | None = None
            try:
                final, stop = await self.drive(run)
            except Exception as exc:  # the SDK's own exception: typed below from what the endpoint saw
                error, final, stop = exc, None, "error"
            calls = endpoint.calls()
        if run.failure is not None:
            raise run.failure  # failed(environment), failed(sandbox), ...: never what the SDK made of it
        backend = endpoint.backend
        if backend.errors and calls and calls[-1].response is None and not backend.limit_hit:
            raise backend.errors[-1]  # the SDK ended on a model error
        answered = [c for c in calls if c.response is not None]
        if backend.limit_hit:
            stop = "max_steps"
        elif error is not None:
            if not answered:
                raise AgentError(f"{self.name} failed without a model answer: {type(error).__name__}: {error}")
            raise AgentError(f"{self.name} raised {type(error).__name__}: {error}",
                             hint="the SDK's own error; see the trajectory's model calls") from error
        messages, rebuilt_final = rebuild_messages(calls)
        harness = {"sdk": self.name, "version": self.installed_version(), "dialect": self.dialect,
                   "model_calls": len(calls), "answered_calls": len(answered), **run.notes}
        return Trajectory.model_validate({
            "messages": messages or list(session.messages), "tool_calls": tools.records,
            "final_answer": final if final is not None else (rebuilt_final if stop == "final" else None),
            "steps": len(answered), "stop_reason": stop, "harness": harness})


def factory(cls: type[SDKAgent]) -> Callable[..., SDKAgent]:
    """A registry factory for an SDK harness class (``max_steps`` from the run or the spec)."""

    def make(max_steps: int = 16) -> SDKAgent:
        return cls(max_steps=max_steps)

    make.__name__ = f"{cls.__name__}_factory"
    return make
