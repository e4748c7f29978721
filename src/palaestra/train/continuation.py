"""Exact continuation across turns: each request carries the previous turn's token ids.

A chat template re-renders the whole conversation on every turn, and the re-rendering of the model's own
earlier output is often not the tokens it sampled (a tool call re-serialised, different whitespace, BPE
merging across the boundary). ``ContinuationBackend`` sits between the model proxy and a backend that
understands continuation: it remembers, per rollout, the prompt ids + generated ids of the last call and,
when the next request extends that conversation by the model's own reply, adds

- ``continue_token_ids``: the previous prompt ids followed by the previous generated ids, and
- ``continue_messages``: how many leading ``messages`` those ids stand for,

so the backend tokenizes only the new messages and appends them (``continued_prompt`` below). Prompts
then extend each other by construction and a rollout trains as one sequence. Backends that do not know
the fields ignore them (OpenAI-compatible servers drop unknown fields or reject them: leave it off there).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from palaestra.models.base import CallContext, ModelBackend
from palaestra.server.model_proxy import token_fields

Message = dict[str, Any]
CONTINUE_IDS = "continue_token_ids"
CONTINUE_MESSAGES = "continue_messages"


def _call_key(call: Any) -> tuple[str, str]:
    fn = call.get("function", call) if isinstance(call, dict) else {}
    args = fn.get("arguments")
    if not isinstance(args, str):
        import json

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


def continued_prompt(render: Callable[[list[Message], bool], str], encode: Callable[[str], list[int]],
                     messages: list[Message], continue_ids: list[int], covered: int,
                     end_texts: Iterable[str], ended: bool) -> list[int] | None:
    """Prompt ids = ``continue_ids`` + the tokens of everything the template adds after them.

    ``render(msgs, add_generation_prompt)`` is the backend's own template rendering, ``encode`` its
    tokenizer (no special tokens added). The template's text for ``messages[:covered]`` must be a prefix of
    its text for all ``messages``; what follows the end of the last covered assistant turn (the text after
    its end-of-turn marker, one of ``end_texts``) is tokenized and appended. ``ended`` says whether the
    generation stopped on an end-of-turn token; if not (cut by a length limit), the marker is appended too.
    ``None`` when the conversation cannot be continued (the caller renders from scratch)."""
    if not continue_ids or not 0 < covered < len(messages) or messages[covered - 1].get("role") != "assistant":
        return None
    head = render(messages[:covered], False)
    full = render(messages, True)
    if not full.startswith(head):
        return None
    cut = max(((head.rfind(t), t) for t in end_texts if t), default=(-1, ""))
    if cut[0] < 0:
        return None
    tail = head[cut[0] + (len(cut[1]) if ended else 0):]
    return list(continue_ids) + encode(tail + full[len(head):])
