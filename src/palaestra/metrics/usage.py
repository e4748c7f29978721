"""Model usage per answering model: calls, tokens and (when priced) cost — what a routing strategy
spends, next to what it scores. A routed call counts for the model that answered it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def as_count(value: Any) -> int:
    """A stored count as an int; anything that is not a plausible number (bool, NaN, huge) is 0."""
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and abs(value) < 2**62 else 0


def model_usage(records: Iterable[Mapping[str, Any]], prices: Mapping[str, float] | None = None
                ) -> dict[str, dict[str, Any]]:
    """``{model: {"calls", "prompt_tokens", "completion_tokens", "cost"?}}`` over every attempt's calls.

    Failed attempts count too: their calls were made and paid for."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        traj = r.get("trajectory") if isinstance(r, Mapping) else None
        calls = traj.get("model_calls") if isinstance(traj, Mapping) else None
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, Mapping):
                continue  # a record it cannot read is skipped: compute_metrics reports invalid records
            name = call.get("routed_to") or r.get("model") or "?"
            row = out.setdefault(str(name), {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
            usage = call.get("usage")
            usage = usage if isinstance(usage, Mapping) else {}
            row["calls"] += 1
            row["prompt_tokens"] += as_count(usage.get("prompt_tokens"))
            row["completion_tokens"] += as_count(usage.get("completion_tokens"))
    for name, row in out.items():
        if prices and name in prices:
            row["cost"] = (row["prompt_tokens"] + row["completion_tokens"]) * prices[name] / 1e6
    return dict(sorted(out.items()))
