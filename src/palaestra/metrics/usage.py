"""Model usage per answering model: calls, tokens and (when priced) cost — what a routing strategy
spends, next to what it scores. A routed call counts for the model that answered it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from palaestra.metrics.rows import is_map


def as_count(value: Any) -> int:
    """A stored count as an int; anything that is not a plausible number (bool, NaN, huge) is 0."""
    if type(value) is int:  # what a journal holds (the end of a run reads every call's two counts)
        return value if -2**62 < value < 2**62 else 0
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and abs(value) < 2**62 else 0


def model_usage(records: Iterable[Mapping[str, Any]], prices: Mapping[str, float] | None = None
                ) -> dict[str, dict[str, Any]]:
    """``{model: {"calls", "prompt_tokens", "completion_tokens", "cost"?}}`` over every attempt's calls.

    Failed attempts count too: their calls were made and paid for."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        traj = r.get("trajectory") if is_map(r) else None
        calls = traj.get("model_calls") if is_map(traj) else None
        for call in calls if isinstance(calls, list) else []:
            if not is_map(call):
                continue  # a record it cannot read is skipped: compute_metrics reports invalid records
            name = str(call.get("routed_to") or r.get("model") or "?")
            row = out.get(name)
            if row is None:
                row = out[name] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
            usage = call.get("usage")
            usage = usage if is_map(usage) else {}
            row["calls"] += 1
            row["prompt_tokens"] += as_count(usage.get("prompt_tokens"))
            row["completion_tokens"] += as_count(usage.get("completion_tokens"))
    for name, row in out.items():
        if prices and name in prices:
            row["cost"] = (row["prompt_tokens"] + row["completion_tokens"]) * prices[name] / 1e6
    return dict(sorted(out.items()))
