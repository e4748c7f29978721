"""Turn a run's journal into ``metrics.json``: scores, failures, coverage and intervals per group.

Rules that keep the numbers honest:

* A journal holds every *attempt*. For each (task, repeat) the last scored attempt counts; if no attempt
  was scored, the last attempt counts as a failure of its kind. A failure is never a reward of 0: it
  lowers ``coverage`` and shows up in ``n_failed``, never in ``mean_reward`` or pass@k.
* The unit of statistics is the task (as run by one env/agent/model): pass@k, pass^k and majority@k
  are means over tasks with at least one scored rollout, and intervals resample tasks, not rollouts.
  In a block that mixes agents or models (``overall`` of a comparison) a task run by two models is
  two units, so pass@k never pools samples of different policies; ``n_tasks`` counts distinct
  ``(env, task_id)``. ``per_task`` pools everything by task id.
* ``mean_reward`` is rollout-weighted (total reward / scored rollouts); pass@1 is task-weighted.
* ``expected`` maps ``(env, task_id)`` to the number of repeats the run asked for. Without it the
  denominator of coverage is the (task, repeat) slots seen in the journal, so tasks that never
  reached the journal can only be revealed by passing ``expected``.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from pydantic import ValidationError
from rich.table import Table

from palaestra.core.records import Rollout
from palaestra.metrics.passk import (
    cluster_bootstrap_ci,
    ks_for,
    majority_at_k,
    pass_at_1_ci,
    pass_at_k,
    pass_hat_k,
)
from palaestra.metrics.rows import STATUSES, Row, rollout_problem, row_from_rollout

__all__ = ["compute_metrics", "format_table"]

UnitKey = tuple[str, str, str, str]  # (env, agent, model, task_id): one task as run by one policy


@dataclass(slots=True)
class _Unit:
    """The effective rollouts of one task inside one block, in repeat order."""

    scored: list[Row] = field(default_factory=list)
    failed: list[Row] = field(default_factory=list)


def _rows(rollouts: Iterable[Row | Rollout | Mapping[str, Any]]) -> tuple[list[Row], list[str]]:
    """Every input as a summary row (``metrics.rows``): a row as it is, a Rollout read into one, a journal
    dict validated as a Rollout first. What is not a Rollout is reported, not fatal: metrics of a long run
    must not be lost to one odd record."""
    rows: list[Row] = []
    invalid: list[str] = []
    for seq, raw in enumerate(rollouts):
        if isinstance(raw, Row):
            if raw.status in STATUSES:
                rows.append(raw)
            else:  # a row read tolerantly (the viewer's) of a record whose status is none of a Rollout's
                invalid.append(f"record {seq + 1}: not a Rollout (outcome.status: {raw.status!r} is not one of "
                               f"{', '.join(sorted(STATUSES))})")
            continue
        try:
            r = raw if isinstance(raw, Rollout) else Rollout.model_validate(raw)
        except ValidationError as exc:
            invalid.append(f"record {seq + 1}: not a Rollout ({rollout_problem(exc)})")
            continue
        rows.append(row_from_rollout(seq, r))
    return rows, invalid


def _effective(rows: list[Row]) -> list[Row]:
    """One row per (env, agent, model, task, repeat): the last scored attempt, else the last attempt."""
    best: dict[tuple[str, str, str, str, int], tuple[tuple[int, int, int], Row]] = {}
    for seq, r in enumerate(rows):
        slot = (r.env, r.agent, r.model, r.task_id, r.repeat)
        rank = (1 if r.scored else 0, r.attempt, seq)
        held = best.get(slot)
        if held is None or rank > held[0]:
            best[slot] = (rank, r)
    return [r for _, r in best.values()]


def _failure_kind(r: Row) -> str:
    """The kind a failed slot counts under: the row's own (``Row.failure_kind``: ``timeout`` for a timed-out
    rollout, ``no_verdict`` for one said scored that has no reward), the same word the report shows."""
    return r.failure_kind or "unknown"


_GROUP_FIELDS = ("env", "agent", "model", "task_id", "repeat", "attempt", "status", "kind", "tags")


def _group_label(r: Row, group_by: Sequence[str]) -> str:
    parts = []
    for name in group_by:
        value = getattr(r, name)
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        parts.append(f"{name}={value}")
    return " ".join(parts) or "all"


class _Labels:
    """``_group_label`` of each row, worked out once per distinct group: a run has a handful of groups and
    thousands of rollouts."""

    def __init__(self, group_by: Sequence[str]):
        self.group_by = tuple(group_by)
        self.known: dict[tuple[Any, ...], str] = {}
        unknown = [name for name in self.group_by if name not in _GROUP_FIELDS]
        if unknown:
            raise ValueError(f"compute_metrics: group_by field {unknown[0]!r} is not a Rollout field metrics can "
                             f"group by; choose from {', '.join(_GROUP_FIELDS)}")
        # a row's group key in one C call (one name gives the value itself, a key all the same)
        self.key: Callable[[Row], Any] = attrgetter(*self.group_by) if self.group_by else (lambda r: ())

    def __call__(self, r: Row) -> str:
        return self.labelled(self.key(r), r)

    def labelled(self, key: Any, r: Row) -> str:
        """The label of ``r``, whose group key (``self.key(r)``) is ``key``."""
        label = self.known.get(key)
        if label is None:
            label = self.known[key] = _group_label(r, self.group_by)
        return label


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _block(units: dict[UnitKey, _Unit], n_expected: int | None, covered: int,
           n_boot: int, seed: int) -> dict[str, Any]:
    """Metrics of one block; every value is None (not an error) when nothing was scored."""
    failed: Counter[str] = Counter()
    # Per scored unit, in one pass over its rollouts (a scored rollout always has a reward): the sum of its
    # rewards, (samples, passes), and its answers with whether each passed, for majority@k. A unit of one
    # rollout (a run of one repeat: most units) is read without a comprehension per unit.
    sums: list[float] = []
    nc: list[tuple[int, int]] = []
    samples: list[tuple[list[Any], list[bool]]] = []
    has_answers = False
    for u in units.values():
        for r in u.failed:
            failed[_failure_kind(r)] += 1
        scored = u.scored
        if not scored:
            continue
        if len(scored) == 1:
            r = scored[0]
            sums.append(r.reward or 0.0)  # (a scored row's reward is never None)
            nc.append((1, 1 if r.is_pass else 0))
            samples.append(([r.answer], [r.is_pass]))
            has_answers = has_answers or r.answer is not None
            continue
        passes = [r.is_pass for r in scored]
        answers = [r.answer for r in scored]
        sums.append(sum(r.reward or 0.0 for r in scored))
        nc.append((len(scored), sum(passes)))
        samples.append((answers, passes))
        has_answers = has_answers or any(a is not None for a in answers)
    n_scored = sum(n for n, _ in nc)
    ks = ks_for(min((n for n, _ in nc), default=0))
    ci = cluster_bootstrap_ci(sums, [n for n, _ in nc], n_boot=n_boot, seed=seed)
    if nc and len({n for n, _ in nc}) == 1 and all(s == c for s, (_, c) in zip(sums, nc, strict=True)):
        p1_ci = ci  # 0/1 rewards that equal pass, same rollouts per task: the very same resampled statistic
    else:
        p1_ci = pass_at_1_ci(nc, n_boot=n_boot, seed=seed)
    pass_at = {str(k): _mean([pass_at_k(n, c, k) for n, c in nc]) for k in ks}
    pass_hat = {str(k): _mean([pass_hat_k(n, c, k) for n, c in nc]) for k in ks}
    majority: dict[str, float | None] | None = None
    if has_answers:
        majority = {str(k): _mean([majority_at_k(a, p, k) for a, p in samples]) for k in ks}
    return {
        "n_tasks": len({(env, task_id) for env, _, _, task_id in units}),
        "n_tasks_scored": len({(key[0], key[3]) for key, u in units.items() if u.scored}),
        "n_rollouts_scored": n_scored,
        "n_failed": dict(sorted(failed.items())),
        "n_expected": n_expected,
        "coverage": (covered / n_expected) if n_expected else None,
        "mean_reward": (sum(sums) / n_scored) if n_scored else None,
        "reward_ci95": list(ci) if ci is not None else None,
        "pass_at_1_ci95": list(p1_ci) if p1_ci is not None else None,
        "pass_at_k": pass_at,
        "pass_hat_k": pass_hat,
        "majority_at_k": majority,
    }


def compute_metrics(
    rollouts: Iterable[Row | Rollout | Mapping[str, Any]],
    expected: Mapping[tuple[str, str], int] | None = None,
    group_by: Sequence[str] = ("env", "agent", "model"),
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Aggregate journal records (summary rows, Rollout objects or their dicts) into a JSON-able metrics dict.

    ``expected`` maps ``(env, task_id)`` to the number of repeats requested for that task. ``group_by``
    names row fields (``_GROUP_FIELDS``).
    """
    rows, invalid = _rows(rollouts)
    effective = _effective(rows)
    effective.sort(key=attrgetter("env", "task_id", "repeat", "agent", "model"))
    label_of = _Labels(group_by)
    overall: dict[UnitKey, _Unit] = {}
    for r in effective:
        unit = (r.env, r.agent, r.model, r.task_id)
        u = overall.get(unit)
        if u is None:  # (not setdefault: that would build a _Unit per rollout only to drop it)
            u = overall[unit] = _Unit()
        (u.scored if r.scored else u.failed).append(r)
    # Each unit's group, for coverage (the group of its last row, where its rows fall in several), and the
    # groups' units. Most runs have one group (one env, agent and model): it holds every unit.
    groups: dict[str, dict[UnitKey, _Unit]] = {}
    unit_group: dict[UnitKey, str] = {}
    keys = list(map(label_of.key, effective))
    if len(set(keys)) == 1:
        label = label_of(effective[0])
        groups[label] = dict(overall)
        unit_group = dict.fromkeys(overall, label)
    else:
        for r, key in zip(effective, keys, strict=True):
            unit = (r.env, r.agent, r.model, r.task_id)
            unit_group[unit] = label = label_of.labelled(key, r)
            units = groups.setdefault(label, {})
            u = units.get(unit)
            if u is None:
                u = units[unit] = _Unit()
            (u.scored if r.scored else u.failed).append(r)

    # Coverage: per unit, the slots the run expected of it (``expected``, else the slots seen: effective
    # rows are one per slot) and the scored ones among them.
    expected = expected or {}
    group_expected: Counter[str] = Counter()
    group_covered: Counter[str] = Counter()
    for unit, u in overall.items():
        label = unit_group[unit]
        n_scored = len(u.scored)
        exp = int(expected.get((unit[0], unit[3]), n_scored + len(u.failed)))
        group_expected[label] += exp
        group_covered[label] += n_scored if n_scored < exp else exp
    total_expected = sum(group_expected.values())
    total_covered = sum(group_covered.values())
    seen_tasks = {(u[0], u[3]) for u in unit_group}
    for (env, task_id), n in expected.items():
        if (env, task_id) not in seen_tasks:  # a task that never ran still counts in n_tasks
            total_expected += int(n)
            overall.setdefault((env, "", "", task_id), _Unit())

    # Per task id, pooled over every env, agent and model that ran it: passes, scored rollouts, their reward
    # sum (added in the rollouts' order, as a mean of their list would be) and failed slots.
    tallies: dict[str, list[Any]] = {}
    for (_, _, _, task_id), u in overall.items():
        tally = tallies.get(task_id)
        if tally is None:
            tally = tallies[task_id] = [0, 0, 0, 0]
        for r in u.scored:
            tally[0] += r.is_pass
            tally[1] += 1
            tally[2] += r.reward or 0.0
        tally[3] += len(u.failed)
    per_task = {task_id: {"n_failed": failed, "n": n, "pass_rate": passes / n if n else None,
                          "mean_reward": total / n if n else None}
                for task_id, (passes, n, total, failed) in sorted(tallies.items())}

    overall_block = _block(overall, total_expected or None, total_covered, n_boot, seed)
    blocks: dict[str, dict[str, Any]] = {}
    for label in sorted(groups):
        if len(groups) == 1 and len(groups[label]) == len(overall) and group_expected[label] == total_expected:
            blocks[label] = copy.deepcopy(overall_block)  # one group holding every unit: the same numbers
        else:
            blocks[label] = _block(groups[label], group_expected[label], group_covered[label], n_boot, seed)
    return {
        "overall": overall_block,
        "groups": blocks,
        "per_task": per_task,
        "failure_examples": _failure_examples(u for u in overall.values()),
        "invalid_records": invalid,
    }


def _failure_examples(units: Iterable[_Unit]) -> dict[str, dict[str, Any]]:
    """Per failure kind, most frequent first: how many slots ended failed with it and the first one's
    message, so a summary can say *why* a run failed without anyone opening the journal."""
    counts: Counter[str] = Counter()
    first: dict[str, Row] = {}
    for u in units:
        for r in u.failed:
            kind = _failure_kind(r)
            counts[kind] += 1
            first.setdefault(kind, r)
    return {kind: {"count": n, "task_id": first[kind].task_id, "model": first[kind].model,
                   "message": first[kind].message or ""}
            for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def _fmt(x: Any, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def format_table(metrics: Mapping[str, Any], title: str | None = "Palaestra metrics") -> Table:
    """A rich table with one row per metric and one column per block (overall, then each group), so it
    stays readable in an 80-column terminal however many k values there are."""
    blocks: list[tuple[str, Mapping[str, Any]]] = [("overall", metrics.get("overall") or {})]
    groups = list((metrics.get("groups") or {}).items())
    if len(groups) > 1:
        blocks += groups
    ks = sorted({int(k) for _, b in blocks for k in (b.get("pass_at_k") or {})})
    table = Table(title=title)
    table.add_column("metric")
    for name, _ in blocks:
        table.add_column(name.replace(" ", "\n"), justify="right")

    def row(label: str, fn: Any) -> None:
        table.add_row(label, *[fn(b) for _, b in blocks])

    def failed(b: Mapping[str, Any]) -> str:
        kinds = b.get("n_failed") or {}
        return str(sum(kinds.values())) + ("".join(f"\n{k} {n}" for k, n in kinds.items()) if kinds else "")

    def reward(b: Mapping[str, Any]) -> str:
        ci = b.get("reward_ci95")
        return _fmt(b.get("mean_reward")) + (f"\n[{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else "")

    row("tasks", lambda b: str(b.get("n_tasks", 0)))
    row("rollouts scored", lambda b: str(b.get("n_rollouts_scored", 0)))
    row("failed", failed)
    row("coverage", lambda b: "–" if b.get("coverage") is None else f"{100 * b['coverage']:.1f}%")
    row("mean reward [95% CI]", reward)
    for k in ks:
        row(f"pass@{k}", lambda b, k=k: _fmt((b.get("pass_at_k") or {}).get(str(k))))
    for k in ks[1:]:
        row(f"pass^{k}", lambda b, k=k: _fmt((b.get("pass_hat_k") or {}).get(str(k))))
    if any(b.get("majority_at_k") for _, b in blocks):
        for k in ks:
            row(f"maj@{k}", lambda b, k=k: _fmt((b.get("majority_at_k") or {}).get(str(k))))
    fidelity = metrics.get("token_fidelity")
    if isinstance(fidelity, Mapping):  # only runs whose model returned token ids; zero checked: "not checked"
        checked, rate = int(fidelity.get("checked_turns") or 0), fidelity.get("token_drift_rate")
        table.caption = (f"token drift {'not checked' if not checked or rate is None else _fmt(rate)}: "
                         f"{fidelity.get('drifted_turns', 0)} of {checked} checked turns")
    return table
