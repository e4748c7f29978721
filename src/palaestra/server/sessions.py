"""Sessions of one environment: seeded state per task, kept in a store with a TTL and a cap.

The HTTP app and the in-process fast path both go through ``EnvironmentHost``, so every placement runs
exactly the same session logic."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from palaestra.core import ids
from palaestra.core.environment import Environment, maybe_await
from palaestra.core.errors import (
    BadArguments,
    InfraError,
    PalaestraError,
    SessionLimit,
    UnknownSession,
    UnknownTool,
)
from palaestra.core.grading import check_verdict, verifier_exception
from palaestra.core.records import Task, Trajectory, Verdict
from palaestra.wire.env import ToolResult


@dataclass
class Session:
    id: str
    task: Task
    state: Any
    created: float
    last_used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class EnvironmentHost:
    """Owns an Environment instance and its live sessions."""

    def __init__(self, env: Environment, *, ttl_s: float = 3600.0, max_sessions: int | None = None) -> None:
        """``max_sessions`` None: the environment's own cap (``Environment.max_sessions``)."""
        self.env = env
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions if max_sessions is not None else env.max_sessions
        self.sessions: dict[str, Session] = {}
        self.closed_total = 0
        self._tools_cache: list[dict[str, Any]] | None = None

    # ---- lifecycle ---------------------------------------------------------------------------
    async def open(self, task: Task) -> dict[str, Any]:
        """Seed a session for the task and return its id, tool schemas and first messages."""
        self.env.check_task(task)
        if len(self.sessions) >= self.max_sessions:
            await self.reap()
            if len(self.sessions) >= self.max_sessions:
                raise SessionLimit(
                    f"environment '{self.env.name}' holds {len(self.sessions)} sessions (cap {self.max_sessions})",
                    hint="close finished sessions (DELETE /sessions/{id}) or raise max_sessions",
                )
        state = await maybe_await(self.env.seed(task))
        now = time.monotonic()
        sid = ids.session_id()
        self.sessions[sid] = Session(sid, task, state, now, now)
        return {"session_id": sid, "tools": self.tools(task), "messages": self.env.prompt(task)}

    def tools(self, task: Task) -> list[dict[str, Any]]:
        if type(self.env).tool_schemas is Environment.tool_schemas:
            if self._tools_cache is None:
                self._tools_cache = self.env.tool_schemas()
            return self._tools_cache
        return self.env.tool_schemas(task)

    def get(self, session_id: str) -> Session:
        sess = self.sessions.get(session_id)
        if sess is None:
            raise UnknownSession(
                f"no session '{session_id}' in environment '{self.env.name}'",
                hint="it was closed or expired; open a new one with POST /sessions",
            )
        sess.last_used = time.monotonic()
        return sess

    async def close(self, session_id: str) -> bool:
        sess = self.sessions.pop(session_id, None)
        if sess is None:
            return False
        self.closed_total += 1
        await maybe_await(self.env.close(sess.state))
        return True

    async def reap(self) -> int:
        """Close sessions idle past the TTL; returns how many."""
        cutoff = time.monotonic() - self.ttl_s
        stale = [sid for sid, s in self.sessions.items() if s.last_used < cutoff]
        for sid in stale:
            await self.close(sid)
        return len(stale)

    async def close_all(self) -> None:
        """Close every session, then the environment's own resources (judge clients, worker pools)."""
        for sid in list(self.sessions):
            await self.close(sid)
        aclose = getattr(self.env, "aclose", None)
        if aclose is not None:
            await maybe_await(aclose())

    # ---- tools and verification ----------------------------------------------------------------
    async def call_tool(self, session_id: str, name: str, arguments: Any) -> ToolResult:
        """Run a tool. Unknown tool and bad arguments raise; errors *inside* the tool become a ToolResult
        error, because the model caused them and can recover."""
        sess = self.get(session_id)
        spec = self.env.tool_specs().get(name)
        if spec is not None:
            args = spec.validate(arguments)
            run = lambda: getattr(self.env, spec.method_name)(sess.state, **args)  # noqa: E731
        else:  # per-task tools; the hook validates, and raises UnknownTool for a name it does not know
            run = lambda: self.env.dynamic_tool(sess.state, name, arguments)  # noqa: E731
        async with sess.lock:
            try:
                output = await maybe_await(run())
            except (UnknownTool, BadArguments, InfraError):
                raise  # InfraError: a sandbox died under the tool: failed(sandbox), not the model's fault
            except PalaestraError as exc:  # ToolError and friends: the model reads them and recovers
                return ToolResult(error=exc.to_dict())
            except Exception as exc:  # the tool's own bug or the model's bad input: show it, keep going
                return ToolResult(
                    error={"kind": "tool_exception", "message": f"{type(exc).__name__}: {exc}"[:2000]}
                )
        if hasattr(output, "model_dump"):
            output = output.model_dump(mode="json")
        return ToolResult(output=output)

    async def verify(self, session_id: str, trajectory: Trajectory) -> Verdict:
        sess = self.get(session_id)
        async with sess.lock:
            return await self._verify(sess.state, trajectory)

    async def _verify(self, state: Any, trajectory: Trajectory) -> Verdict:
        """The grading contract (core/grading.py) for every environment: a Verdict, or a typed failure. A
        judge or sandbox failure keeps its kind (failed(judge)); any other exception is failed(verifier)."""
        try:
            verdict = await maybe_await(self.env.verify(state, trajectory))
        except Exception as exc:
            failure = verifier_exception(self.env.name, exc)
            if failure is exc:
                raise
            raise failure from exc
        return check_verdict(verdict, self.env.name)

    async def verify_stateless(self, task: Task, trajectory: Trajectory) -> Verdict:
        """Re-verify a stored trajectory: seed a fresh state, replay its tool calls, verify, close.

        This is what makes ``reverify`` possible without any model call."""
        self.env.check_task(task)
        state = await maybe_await(self.env.seed(task))
        try:
            for call in trajectory.tool_calls:
                try:
                    await self.env.call_tool(state, call.name, call.arguments)
                except Exception:  # replay mirrors the original run, where this error was shown to the model
                    continue
            return await self._verify(state, trajectory)
        finally:
            await maybe_await(self.env.close(state))
