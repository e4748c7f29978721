"""Training rows from rollouts: ``sft`` (conversations above a reward threshold), ``dpo`` (chosen/rejected
pairs per task) and ``rl`` (token ids, loss masks, sampling logprobs, rewards, GRPO advantages).

Only scored rollouts count: an infrastructure failure is not a reward of 0 and must not teach anything.
Messages are normalised to one fixed shape (role, content, tool_calls, tool_call_id, name) so every row
has the same columns in Parquet and loads as a conversational dataset in TRL.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from palaestra.core.records import Message, Rollout
from palaestra.train.advantages import Normalisation, group_advantages
from palaestra.train.sequence import DriftPolicy, SequenceResult, build_samples, token_drift_rate

Row = dict[str, Any]


@dataclass
class ExportStats:
    """What an export used, skipped (and why), and the token-fidelity figures."""

    kind: str
    rollouts: int = 0
    scored: int = 0
    rows: int = 0
    groups: int = 0
    flat_groups: int = 0  # groups whose rewards are all equal: zero advantage, no learning signal
    skipped: Counter[str] = field(default_factory=Counter)
    checked_turns: int = 0
    drifted_turns: int = 0
    token_drift_rate: float | None = None  # None: no turn could be checked (not a measured 0.0)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "skipped"}
        out["skipped"] = dict(self.skipped)
        return out


def group_key(rollout: Rollout) -> str:
    """Rollouts of the same task form a GRPO group (and a DPO pair pool)."""
    return f"{rollout.env}/{rollout.task_id}"


def scored(rollouts: list[Rollout], stats: ExportStats) -> list[Rollout]:
    """Scored rollouts, one per (task, repeat): a resumed run may hold several attempts of a slot."""
    seen: set[tuple[str, str, int]] = set()
    out = []
    for r in rollouts:
        stats.rollouts += 1
        if r.reward is None:
            stats.skipped[f"outcome {r.outcome.status}" + (f" ({r.outcome.kind})" if r.outcome.kind else "")] += 1
            continue
        slot = (r.env, r.task_id, r.repeat)
        if slot in seen:
            stats.skipped["duplicate scored attempt"] += 1
            continue
        seen.add(slot)
        out.append(r)
    stats.scored = len(out)
    return out


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def normalise_message(m: Message) -> Message:
    calls = None
    if m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            fn = c.get("function") or {}
            args = fn.get("arguments")
            calls.append({"id": str(c.get("id") or ""), "type": "function",
                          "function": {"name": str(fn.get("name") or ""),
                                       "arguments": args if isinstance(args, str) else json.dumps(args or {})}})
    return {"role": str(m.get("role") or ""), "content": _text(m.get("content")), "tool_calls": calls,
            "tool_call_id": m.get("tool_call_id"), "name": m.get("name")}


def tools_of(rollout: Rollout) -> list[dict[str, Any]] | None:
    """The tool schemas the model was shown (from its first request), if any."""
    for call in rollout.trajectory.model_calls:
        tools = call.request.get("tools")
        if tools:
            return list(tools)
    return None


def _split_prompt(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return messages[:first], messages[first:]


def sft_rows(rollouts: list[Rollout], min_reward: float = 1.0) -> tuple[list[Row], ExportStats]:
    stats = ExportStats("sft")
    rows = []
    for r in scored(rollouts, stats):
        if (r.reward or 0.0) < min_reward:
            stats.skipped[f"reward below {min_reward:g}"] += 1
            continue
        messages = [normalise_message(m) for m in r.trajectory.messages]
        if not any(m["role"] == "assistant" for m in messages):
            stats.skipped["no assistant message"] += 1
            continue
        rows.append({"messages": messages, "tools": tools_of(r), "reward": r.reward, "task_id": r.task_id,
                     "env": r.env, "rollout_id": r.rollout_id})
    stats.rows = len(rows)
    return rows, stats


def dpo_rows(rollouts: list[Rollout], *, pairs: str = "best_worst", min_margin: float = 0.0,
             max_pairs_per_task: int = 4) -> tuple[list[Row], ExportStats]:
    """Per task, (chosen, rejected) with ``chosen.reward - rejected.reward > min_margin``: the best against
    the worst (``best_worst``) or every such pair, best margins first (``all``, at most
    ``max_pairs_per_task``). The prompt is the messages before the first assistant turn."""
    if pairs not in ("best_worst", "all"):
        raise ValueError(f"unknown pairing {pairs!r}: use best_worst or all")
    stats = ExportStats("dpo")
    by_group: dict[str, list[Rollout]] = {}
    for r in scored(rollouts, stats):
        by_group.setdefault(group_key(r), []).append(r)
    rows = []
    for members in by_group.values():
        stats.groups += 1
        ranked = sorted(members, key=lambda r: (-(r.reward or 0.0), r.repeat))
        if pairs == "best_worst":
            candidates = [(ranked[0], ranked[-1])]
        else:
            candidates = sorted(((a, b) for i, a in enumerate(ranked) for b in ranked[i + 1:]),
                                key=lambda p: -((p[0].reward or 0.0) - (p[1].reward or 0.0)))
        made = 0
        for chosen, rejected in candidates:
            if made >= max_pairs_per_task or (chosen.reward or 0.0) - (rejected.reward or 0.0) <= min_margin:
                continue
            prompt, chosen_turns = _split_prompt([normalise_message(m) for m in chosen.trajectory.messages])
            _, rejected_turns = _split_prompt([normalise_message(m) for m in rejected.trajectory.messages])
            rows.append({"prompt": prompt, "chosen": chosen_turns, "rejected": rejected_turns,
                         "tools": tools_of(chosen), "chosen_reward": chosen.reward,
                         "rejected_reward": rejected.reward, "task_id": chosen.task_id, "env": chosen.env,
                         "chosen_rollout_id": chosen.rollout_id, "rejected_rollout_id": rejected.rollout_id})
            made += 1
        if not made:
            stats.flat_groups += 1
            stats.skipped[f"task without a pair whose rewards differ by more than {min_margin:g}"] += 1
    stats.rows = len(rows)
    return rows, stats


def rl_rows(rollouts: list[Rollout], *, normalisation: Normalisation = "group",
            on_drift: DriftPolicy = "per_turn") -> tuple[list[Row], ExportStats]:
    """Token rows with GRPO advantages. Every scored rollout counts towards its group's baseline, even
    one whose tokens cannot be used (no capture, dropped on drift): its reward is still a fair draw."""
    stats = ExportStats("rl")
    kept = scored(rollouts, stats)
    advantages = group_advantages([r.reward or 0.0 for r in kept], [group_key(r) for r in kept], normalisation)
    groups: dict[str, set[float]] = {}
    for r in kept:
        groups.setdefault(group_key(r), set()).add(r.reward or 0.0)
    stats.groups = len(groups)
    stats.flat_groups = sum(1 for rewards in groups.values() if len(rewards) == 1)
    results: list[SequenceResult] = []
    rows = []
    for r, adv in zip(kept, advantages):
        result = build_samples(r, on_drift)
        results.append(result)
        if result.skipped:
            stats.skipped[result.skipped] += 1
            continue
        drifted = sorted({d.turn for d in result.drifts})
        for i, s in enumerate(result.samples):
            rows.append({"rollout_id": r.rollout_id, "task_id": r.task_id, "env": r.env, "group": group_key(r),
                         "repeat": r.repeat, "sample_index": i, "num_samples": len(result.samples),
                         "prompt_ids": s.prompt_ids, "completion_ids": s.completion_ids,
                         "completion_mask": s.completion_mask, "completion_logprobs": s.completion_logprobs,
                         "reward": r.reward, "advantage": adv, "turns": s.turns, "drifted": bool(drifted),
                         "drifted_turns": drifted})
    stats.rows = len(rows)
    stats.checked_turns = sum(r.checked for r in results)
    stats.drifted_turns = sum(len(r.drifts) for r in results)
    stats.token_drift_rate = token_drift_rate(results)
    return rows, stats
