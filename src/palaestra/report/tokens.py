"""The token view of a rollout: generated ids with their logprobs, the loss mask, and drift flags.

A trainer learns from exactly the tokens the policy produced, so the viewer shows them rather than the
decoded text: one chip per generated token coloured by its logprob. Ids cannot be decoded without the
tokenizer, so the text of a chip is the token piece when the backend returned it (vLLM-style
``choices[0].logprobs.content[i].token``) and the id otherwise.

Across turns each prompt must extend the previous prompt plus its generation. When it does, the whole
conversation is one token sequence whose loss mask is 1 exactly on generated tokens; when it does not
(the chat template re-rendered earlier tokens differently) the turn is flagged as drifted, with the
position of the first differing token, and no single-sequence mask exists.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from palaestra.metrics.rows import is_map

__all__ = ["token_view"]

MAX_SEQUENCE_TOKENS = 16_000  # a longer merged sequence is cut (the per-turn view still has everything)


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def _logprob_block(response: Any) -> Any:
    """The first choice's ``logprobs`` block of a chat completion (None when there is none)."""
    if not is_map(response):
        return None
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not is_map(choices[0]):
        return None
    return choices[0].get("logprobs")


def _logprob_content(response: Any) -> list[Mapping[str, Any]]:
    block = _logprob_block(response)
    content = block.get("content") if is_map(block) else None
    return [c for c in content if is_map(c)] if isinstance(content, list) else []


def _may_carry_tokens(call: Any) -> bool:
    """False only for a call ``_turn`` surely makes no turn of: one without token ids, logprobs, or a
    logprobs block in its response. Asked of every call first, so that the common case (none has any)
    builds nothing."""
    return is_map(call) and (call.get("generation_token_ids") is not None
                             or call.get("generation_logprobs") is not None
                             or _logprob_block(call.get("response")) is not None)


def _turn(index: int, call: Mapping[str, Any]) -> dict[str, Any] | None:
    content = _logprob_content(call.get("response"))
    ids = _ints(call.get("generation_token_ids"))
    logprobs = call.get("generation_logprobs")
    if not (isinstance(logprobs, list) and all(isinstance(v, (int, float)) for v in logprobs)):
        logprobs = [c.get("logprob") for c in content] if content else None
        if logprobs is not None and not all(isinstance(v, (int, float)) for v in logprobs):
            logprobs = None
    pieces: list[str] | None = [str(c.get("token", "")) for c in content] if content else None
    if ids is None and logprobs is None and pieces is None:
        return None
    n = max(len(x) for x in (ids, logprobs, pieces) if x is not None)
    prompt = _ints(call.get("prompt_token_ids"))
    return {
        "call": index,
        "prompt_ids": prompt,
        "prompt_len": len(prompt) if prompt is not None else None,
        "ids": ids,
        "logprobs": [float(v) for v in logprobs] if logprobs is not None else None,
        "pieces": pieces if pieces is not None and len(pieces) == n else None,
        "n": n,
        "drift": None,
        "drift_at": None,
    }


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index where ``b`` stops extending ``a``; None when ``b`` starts with all of ``a``."""
    for i, x in enumerate(a):
        if i >= len(b) or b[i] != x:
            return i
    return None


def token_view(model_calls: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Per-turn token data plus, when every turn is contiguous, the merged sequence and its loss mask.

    Returns None when no model call carried token ids, logprobs or pieces.
    """
    for c in model_calls:  # most calls carry no token data: then there is nothing to build
        if _may_carry_tokens(c):
            break
    else:
        return None
    turns = [t for i, c in enumerate(model_calls) if is_map(c) and (t := _turn(i, c))]
    if not turns:
        return None
    for prev, cur in itertools.pairwise(turns):
        if prev["prompt_ids"] is None or cur["prompt_ids"] is None or prev["ids"] is None:
            continue
        at = _first_difference(prev["prompt_ids"] + prev["ids"], cur["prompt_ids"])
        cur["drift"], cur["drift_at"] = at is not None, at
    sequence = _merged(turns)
    all_lp = [v for t in turns for v in (t["logprobs"] or [])]
    for t in turns:
        t.pop("prompt_ids")
    return {
        "turns": turns,
        "sequence": sequence,
        "n_generated": sum(t["n"] for t in turns),
        "mean_logprob": sum(all_lp) / len(all_lp) if all_lp else None,
        "min_logprob": min(all_lp) if all_lp else None,
        "drifted_turns": sum(1 for t in turns if t["drift"]),
        "checked_turns": sum(1 for t in turns if t["drift"] is not None),
    }


def _merged(turns: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last prompt + generation as one sequence, mask spans ``[start, end, turn]`` on generated tokens.

    Only defined when every turn has prompt and generation ids and no turn drifted: otherwise the earlier
    generations are not where the mask would claim they are.
    """
    if any(t["prompt_ids"] is None or t["ids"] is None or t["drift"] for t in turns):
        return None
    last = turns[-1]
    ids: list[int] = last["prompt_ids"] + last["ids"]
    spans = [[t["prompt_len"], t["prompt_len"] + len(t["ids"]), k] for k, t in enumerate(turns)]
    truncated = len(ids) > MAX_SEQUENCE_TOKENS
    return {"ids": ids[:MAX_SEQUENCE_TOKENS], "length": len(ids), "mask_spans": spans, "truncated": truncated}
