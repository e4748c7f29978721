"""What every trainer integration needs between a synchronous trainer and Palaestra's async rollouts.

- ``LoopThread``: trainers call their rollout hook synchronously, once per step, while Palaestra's
  collector is async and keeps state across steps (mounted environments, the policy's engine, the
  continuation cache). One event loop on a daemon thread holds that state for the trainer's lifetime;
  each hook call blocks on one coroutine there. ``asyncio.run`` per step would close the loop the mounted
  environments live on.
- ``TurnToolChoice``: a per-turn ``tool_choice`` schedule (``["required", "none"]``: call a tool first,
  then answer). A small policy rarely calls a tool on its own, and a rollout that never does teaches a tool
  environment nothing; forcing the first turn is the usual start of tool RL. Constrained decoding makes
  the forced call well formed; the ids it samples are still the policy's own, with their logprobs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from palaestra.models.base import CallContext, ModelBackend

T = TypeVar("T")


class LoopThread:
    """An event loop running on its own daemon thread; ``run`` blocks the caller on one coroutine."""

    def __init__(self, name: str = "palaestra-trainer-bridge") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("this bridge is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()


class TurnToolChoice:
    """Wrap ``inner`` so turn n of a rollout (n = assistant messages so far) sends ``schedule[n]`` as
    ``tool_choice`` (the last entry holds for later turns). Requests without tools pass unchanged."""

    def __init__(self, inner: ModelBackend, schedule: Sequence[Any]) -> None:
        if not schedule:
            raise ValueError("an empty tool_choice schedule: give at least one entry")
        self.inner = inner
        self.schedule = list(schedule)
        self.name = getattr(inner, "name", "tool-choice")
        self.model = getattr(inner, "model", None)

    def __getattr__(self, name: str) -> Any:  # forget(), engine, ... of the wrapped backend
        return getattr(self.inner, name)

    async def chat(self, request: dict[str, Any], ctx: CallContext | None = None) -> dict[str, Any]:
        if request.get("tools"):
            turn = sum(1 for m in request.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
            request = {**request, "tool_choice": self.schedule[min(turn, len(self.schedule) - 1)]}
        return await self.inner.chat(request, ctx or CallContext())

    async def aclose(self) -> None:
        await self.inner.aclose()
