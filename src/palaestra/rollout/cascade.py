"""The cascade strategy: run a rollout on the cheapest model first and escalate to the next one when
the verdict fails (or the answer's confidence is low). One journal record per (task, repeat) holds the
final verdict, every stage's model calls (each marked with the model that answered), the summed usage,
and the routing history."""

from __future__ import annotations

from typing import Any

from palaestra.core.records import Rollout, Task, Usage
from palaestra.models.router import RouteSpec
from palaestra.rollout.models import ModelPool, needs_reference
from palaestra.rollout.runner import run_rollout


def answer_confidence(rollout: Rollout) -> float | None:
    """Mean token logprob of the final model call, when the backend gave logprobs."""
    calls = [c for c in rollout.trajectory.model_calls if c.generation_logprobs]
    if not calls:
        return None
    lp = calls[-1].generation_logprobs or []
    return sum(lp) / len(lp) if lp else None


async def run_cascade(task: Task, route: RouteSpec, label: str, pool: ModelPool, **kw: Any) -> Rollout:
    history: list[dict[str, Any]] = []
    calls = []
    usage = Usage()
    final: Rollout | None = None
    for name in route.to:
        spec = pool.resolve(name)
        r = await run_rollout(task, proxy=pool.proxy(name), model_name=name, with_reference=needs_reference(spec),
                              **kw)
        for call in r.trajectory.model_calls:
            call.routed_to = call.routed_to or name
        calls.extend(r.trajectory.model_calls)
        for field in ("prompt_tokens", "completion_tokens", "model_calls", "tool_calls"):
            setattr(usage, field, getattr(usage, field) + getattr(r.usage, field))
        confidence = answer_confidence(r)
        history.append({"model": name, "outcome": r.outcome.status, "kind": r.outcome.kind,
                        "reward": r.reward, "passed": r.verdict.is_pass() if r.verdict else None,
                        "confidence": confidence})
        final = r
        if r.outcome.status != "scored":
            break  # an infrastructure failure is retried as a whole, never escalated past
        low = route.min_confidence is not None and confidence is not None and confidence < route.min_confidence
        if r.verdict is not None and r.verdict.is_pass() and not low:
            break
    assert final is not None
    final.model = label
    final.trajectory.model_calls = calls
    final.usage = usage
    final.routing = history  # type: ignore[attr-defined]  # Record keeps extra fields
    return final
