"""Exact continuation across turns: each request of a rollout carries the previous turn's token ids.

``ContinuationBackend`` sits between the model proxy and a backend that understands continuation (the
local model: ``models/local/continuation.py``). It remembers, per rollout, the prompt ids + generated ids
of the last call and, when the next request extends that conversation by the model's own reply, adds
``continue_token_ids`` and ``continue_messages``, so the backend tokenizes only the new messages and a
rollout's prompts extend each other by construction: one exact sequence, drift 0 by construction rather
than by luck of the tokenizer.

``with_continuation`` is how a run turns it on by default: every backend that declares
``continues_tokens`` is wrapped. Others are left alone (OpenAI-compatible servers drop unknown fields or
reject them); their turns are still checked for drift and reported.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from palaestra.models.base import CallContext, ModelBackend
from palaestra.models.local.continuation import CONTINUE_IDS, CONTINUE_MESSAGES
from palaestra.server.model_proxy import token_fields

Message = dict[str, Any]

__all__ = ["CONTINUE_IDS", "CONTINUE_MESSAGES", "ContinuationBackend", "same_message", "with_continuation"]


def _call_key(call: Any) -> tuple[str, str]:
    fn = call.get("function", call) if isinstance(call, dict) else {}
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args, sort_keys=True)
    return str(fn.get("name")), args


def same_message(a: Message, b: Message) -> bool:
    """Whether two messages say the same thing (an agent may rebuild the assistant message it got)."""
    if a.get("role") != b.get("role"):
        return False
    if a.get("role") != "assistant":
        return a == b
    return ((a.get("content") or "") == (b.get("content") or "")
            and [_call_key(c) for c in a.get("tool_calls") or []] == [_call_key(c) for c in b.get("tool_calls") or []])


class ContinuationBackend:
    """Wrap ``inner`` so every call of a rollout continues from the exact ids of the one before."""

    def __init__(self, inner: ModelBackend, *, max_rollouts: int = 4096) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "continuation")
        self.model = getattr(inner, "model", None)
        self.max_rollouts = max_rollouts
        self._last: OrderedDict[str, tuple[list[Message], list[int]]] = OrderedDict()
        self.continued = 0  # calls sent with continuation ids
        self.fresh = 0  # calls rendered from scratch (first turn, or the conversation was edited)

    def __getattr__(self, name: str) -> Any:  # start(), engine, ... of the wrapped backend
        return getattr(self.inner, name)

    def _prefix(self, rid: str, messages: list[Message]) -> tuple[list[int], int] | None:
        last = self._last.get(rid)
        if last is None:
            return None
        seen, ids = last
        if len(messages) <= len(seen) or not all(same_message(a, b) for a, b in zip(seen, messages)):
            return None
        return ids, len(seen)

    async def chat(self, request: dict[str, Any], ctx: CallContext | None = None) -> dict[str, Any]:
        rid = ctx.rollout_id if ctx is not None else None
        messages = request.get("messages") or []
        found = self._prefix(rid, messages) if rid else None
        body = request
        if found is not None:
            body = {**request, CONTINUE_IDS: found[0], CONTINUE_MESSAGES: found[1]}
            self.continued += 1
        else:
            self.fresh += 1
        response = await self.inner.chat(body, ctx or CallContext())
        if rid:
            prompt_ids, gen_ids, _ = token_fields(response)
            choice = (response.get("choices") or [{}])[0]
            reply = choice.get("message") if isinstance(choice, dict) else None
            if prompt_ids and gen_ids is not None and isinstance(reply, dict):
                self._last[rid] = ([*messages, reply], prompt_ids + gen_ids)
                self._last.move_to_end(rid)
                while len(self._last) > self.max_rollouts:
                    self._last.popitem(last=False)
            else:
                self._last.pop(rid, None)
        return response

    def forget(self, rollout_id: str) -> None:
        self._last.pop(rollout_id, None)

    async def aclose(self) -> None:
        await self.inner.aclose()


def with_continuation(backend: ModelBackend) -> ModelBackend:
    """``backend`` wrapped in ``ContinuationBackend`` when it honours continuation ids (and is not wrapped
    already); any other backend unchanged."""
    if isinstance(backend, ContinuationBackend) or not getattr(backend, "continues_tokens", False):
        return backend
    return ContinuationBackend(backend)
