"""Model usage per answering model: calls, tokens and (when priced) cost — what a routing strategy
spends, next to what it scores. A routed call counts for the model that answered it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def model_usage(records: Iterable[Mapping[str, Any]], prices: Mapping[str, float] | None = None
                ) -> dict[str, dict[str, Any]]:
    """``{model: {"calls", "prompt_tokens", "completion_tokens", "cost"?}}`` over every attempt's calls.

    Failed attempts count too: their calls were made and paid for."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        traj = r.get("trajectory") or {}
        for call in traj.get("model_calls") or []:
            name = call.get("routed_to") or r.get("model") or "?"
            row = out.setdefault(name, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
            usage = call.get("usage") or {}
            row["calls"] += 1
            row["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
            row["completion_tokens"] += int(usage.get("completion_tokens") or 0)
    for name, row in out.items():
        if prices and name in prices:
            row["cost"] = (row["prompt_tokens"] + row["completion_tokens"]) * prices[name] / 1e6
    return dict(sorted(out.items()))
