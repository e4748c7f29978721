"""One Palaestra episode, for trainer frameworks that own the rollout loop (SkyRL-gym's ``step``,
verifiers' ``env_response``): open a session, run the model's tool calls, verify, close.

Those frameworks call the model themselves and hand the environment one reply at a time, so Palaestra's
collector does not run there. What must stay Palaestra's is everything on the environment's side: the
session (state, sandbox), the tools, and the verdict. An ``Episode`` goes through the same ``EnvClient``
the collector uses (any placement), records every tool call as a ``ToolCallRecord`` and verifies the
same ``Trajectory`` shape the collector builds, so the reward a trainer gets is the environment's own
verdict. An infrastructure failure raises (``PalaestraError``): these APIs have no "failed" outcome, and a
reward of 0 for a broken sandbox would be trained on.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from palaestra.agents.base import ToolSurface
from palaestra.agents.tool_agent import render_tool_result
from palaestra.client.env_client import EnvClient
from palaestra.core.records import Task, Trajectory, Verdict
from palaestra.integrations.bridge import LoopThread
from palaestra.placement import MountedEnv, mount_env
from palaestra.wire.env import SessionHandle

T = TypeVar("T")
Message = dict[str, Any]


class Episode:
    """One session of a Palaestra environment, driven one model reply at a time."""

    def __init__(self, client: EnvClient, task: Task, session: SessionHandle) -> None:
        self.client = client
        self.task = task
        self.session = session
        self.surface = ToolSurface(client, session)
        self.messages: list[Message] = list(session.messages)  # the conversation as Palaestra records it
        self.verdict: Verdict | None = None
        self.parse_failures = 0
        self._closed = False

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The session's tools as OpenAI function definitions."""
        return self.session.tools

    def add_assistant(self, content: str | None, tool_calls: list[dict[str, Any]] | None = None) -> None:
        message: Message = {"role": "assistant", "content": content if content or not tool_calls else None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        self.messages.append(message)

    async def call(self, name: str, arguments: Any, call_id: str) -> str:
        """Run one tool call in the session; its output (or error) as the text the model reads next."""
        result = await self.surface.call(name, arguments, call_id)
        text = render_tool_result(result)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        return text

    async def finish(self, final_answer: str | None, *, stop_reason: str, steps: int) -> Verdict:
        """Verify the episode (the environment's verifier over its session) and close the session."""
        trajectory = Trajectory(messages=list(self.messages), tool_calls=list(self.surface.records),
                                final_answer=final_answer, steps=steps, stop_reason=stop_reason,
                                parse_failures=self.parse_failures)
        try:
            self.verdict = await self.client.verify(self.session.session_id, trajectory)
        finally:
            await self.close()
        return self.verdict

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                await self.client.close(self.session.session_id)
            except Exception:  # the session TTL frees it; a verdict already made stands
                pass


class Mounts:
    """Mounted environments, one per (event loop, spec, placement): a mount lives on the loop that made it."""

    def __init__(self) -> None:
        self._mounted: dict[tuple[int, str, str], MountedEnv] = {}
        self._locks: dict[int, asyncio.Lock] = {}  # an asyncio.Lock belongs to one loop too

    async def client(self, spec: str, placement: str) -> EnvClient:
        loop_id = id(asyncio.get_running_loop())
        key = (loop_id, spec, placement)
        if key not in self._mounted:
            async with self._locks.setdefault(loop_id, asyncio.Lock()):
                if key not in self._mounted:
                    self._mounted[key] = await mount_env(spec, placement)
        return self._mounted[key].client

    async def open(self, spec: str, task: Task, placement: str = "direct") -> Episode:
        client = await self.client(spec, placement)
        return Episode(client, task, await client.open(task))

    async def stop(self) -> None:
        loop_id = id(asyncio.get_running_loop())
        for key in [k for k in self._mounted if k[0] == loop_id]:
            await self._mounted.pop(key).stop()
        self._locks.pop(loop_id, None)


class SyncEpisodes:
    """``Mounts`` for synchronous callers: one event loop on a daemon thread holds the mounted
    environments, and each call blocks on one coroutine there (``bridge.LoopThread``)."""

    def __init__(self) -> None:
        self._thread: LoopThread | None = None
        self._guard = threading.Lock()  # trainers build environments from several threads
        self.mounts = Mounts()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        with self._guard:
            if self._thread is None:
                self._thread = LoopThread(name="palaestra-episodes")
            thread = self._thread
        return thread.run(coro, timeout)

    def close(self) -> None:
        with self._guard:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.run(self.mounts.stop())
            thread.close()
