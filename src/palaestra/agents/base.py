"""What an agent (harness) gets: a model to call and the environment's tool surface — never reset or
verify, so an agent cannot grade itself."""

from __future__ import annotations

import time
from typing import Any, Protocol

from palaestra.core.records import Task, ToolCallRecord, Trajectory
from palaestra.wire.env import SessionHandle, ToolResult


class ChatModel(Protocol):
    """An OpenAI Chat Completions callable: request body in, response body out (ModelError on failure)."""

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]: ...


class _ToolCaller(Protocol):
    async def call_tool(self, session_id: str, name: str, arguments: Any) -> ToolResult: ...


class ToolSurface:
    """The tools of one session, and a record of every call made through them."""

    def __init__(self, env: _ToolCaller, session: SessionHandle) -> None:
        self._env = env
        self.session_id = session.session_id
        self.schemas = session.tools
        self.records: list[ToolCallRecord] = []

    @property
    def names(self) -> list[str]:
        return [s.get("function", {}).get("name", "") for s in self.schemas]

    async def call(self, name: str, arguments: Any, call_id: str | None = None) -> ToolResult:
        """Call a tool; ``arguments`` may be a dict or the model's raw JSON string."""
        started = time.time()
        t0 = time.perf_counter()
        result = await self._env.call_tool(self.session_id, name, arguments)
        parsed: Any = arguments
        if isinstance(arguments, str):
            import orjson

            try:
                parsed = orjson.loads(arguments) if arguments.strip() else {}
            except orjson.JSONDecodeError:
                parsed = arguments
        self.records.append(
            ToolCallRecord(
                name=name, arguments=parsed, call_id=call_id, output=result.output, error=result.error,
                status="error" if result.error else "ok", started=started,
                duration_s=time.perf_counter() - t0,
            )
        )
        return result


class Agent(Protocol):
    """A harness: drives the model against the tools until it has an answer."""

    name: str

    async def run(self, task: Task, session: SessionHandle, tools: ToolSurface, model: ChatModel,
                  sampling: dict[str, Any]) -> Trajectory: ...


class BackendChat:
    """Adapts any ``ModelBackend``-like object (``chat(body, ctx)``) or proxy (``complete``) to ChatModel."""

    def __init__(self, target: Any, rollout_id: str | None = None, ctx: Any = None,
                 tool_choice: str | None = None) -> None:
        self._target = target
        self._rid = rollout_id
        self._ctx = ctx
        # the run's --tool-choice: set on every request that offers tools (a request without tools would be
        # refused by chat servers with it), over what the agent or the row asked
        self._tool_choice = tool_choice

    @property
    def rollout_id(self) -> str | None:
        return self._rid

    @property
    def target(self) -> Any:
        """What the calls go to: for a rollout, the run's model proxy (a remote agent serves it over HTTP)."""
        return self._target

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._tool_choice is not None and body.get("tools"):
            body = {**body, "tool_choice": self._tool_choice}
        if hasattr(self._target, "complete"):
            result: dict[str, Any] = await self._target.complete(self._rid, "chat", body)
            return result
        from palaestra.models.base import CallContext

        out: dict[str, Any] = await self._target.chat(body, self._ctx or CallContext(rollout_id=self._rid))
        return out
