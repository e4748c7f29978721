"""The model backend contract. Every backend (remote OpenAI-compatible HTTP, scripted, local) answers
OpenAI Chat Completions requests; the model proxy translates the Responses and Anthropic Messages
dialects to and from chat, so a backend implements one method."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from palaestra.core.records import Reference, Task


@dataclass
class CallContext:
    """What the proxy knows about the rollout a call belongs to (empty outside a rollout)."""

    rollout_id: str | None = None
    task: Task | None = None
    reference: Reference | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class ModelBackend(Protocol):
    """A policy. ``chat`` takes an OpenAI chat-completions request body and returns a response body.

    Failures raise ``palaestra.core.errors.ModelError`` (never return an error-shaped body)."""

    name: str

    async def chat(self, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...
