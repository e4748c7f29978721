"""Summary rows: the few fields of a journal record that lists, filters and charts need.

A journal line can be tens of kilobytes (every model request is in it), but the viewer's table, its
filters and every chart of the report only need a handful of scalars. Reducing each record to a ``Row``
once keeps 100,000 rollouts in a few tens of megabytes and lets the static report and the live viewer
share one definition of "passed", "failed" and "effective".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

__all__ = ["COLUMNS", "OUTCOMES", "PHASES", "Effective", "Filter", "Row", "as_map", "is_map", "row_from_record"]

# Phases in the order a rollout goes through them; other timing keys are appended after these.
PHASES = ("seed_s", "agent_s", "verify_s", "close_s", "total_s")

# The JSON form of a row is a list in this order (lists, not dicts: 100k rows stay a few MB smaller).
COLUMNS = ("seq", "rollout_id", "task_id", "group", "repeat", "attempt", "status", "kind", "reward",
           "passed", "steps", "prompt_tokens", "completion_tokens", "total_s", "effective", "message")

# Values the outcome filter accepts: "failed:KIND" narrows "failed" to one kind.
OUTCOMES = ("all", "scored", "passed", "not_passed", "failed", "timed_out", "unscored")

_MESSAGE_CHARS = 200


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _int(value: Any) -> int:
    if type(value) is int:
        return value
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _str(value: Any) -> str:
    return value if type(value) is str else str(value)


@dataclass(slots=True)
class Row:
    """One journal record, reduced. ``seq`` is the record's position among the journal's valid records."""

    seq: int
    rollout_id: str
    task_id: str
    env: str
    agent: str
    model: str
    repeat: int
    attempt: int
    status: str
    kind: str | None
    message: str | None
    reward: float | None
    passed: bool | None
    answer: str | None
    steps: int
    prompt_tokens: int
    completion_tokens: int
    timings: dict[str, float] = field(default_factory=dict)
    effective: bool = True

    @property
    def group(self) -> str:
        return f"{self.env} · {self.agent} · {self.model}"

    @property
    def scored(self) -> bool:
        return self.status == "scored" and self.reward is not None

    @property
    def is_pass(self) -> bool:
        """The same rule as ``Verdict.is_pass``: ``passed`` when the verifier said, else reward >= 1."""
        if not self.scored:
            return False
        return self.passed if self.passed is not None else (self.reward or 0.0) >= 1.0

    @property
    def failure_kind(self) -> str | None:
        if self.scored:
            return None
        if self.status == "timed_out":
            return "timeout"
        return self.kind or ("unknown" if self.status != "scored" else "no_verdict")

    @property
    def slot(self) -> tuple[str, str, str, str, int]:
        return (self.env, self.agent, self.model, self.task_id, self.repeat)

    def to_json(self, groups: dict[str, int]) -> list[Any]:
        """The row as a list in ``COLUMNS`` order; ``groups`` maps group labels to small integers."""
        gid = groups.setdefault(self.group, len(groups))
        return [self.seq, self.rollout_id, self.task_id, gid, self.repeat, self.attempt, self.status,
                self.kind, self.reward, self.passed if self.scored else None, self.steps,
                self.prompt_tokens, self.completion_tokens, self.timings.get("total_s"),
                1 if self.effective else 0, self.message]

    def to_metrics_record(self) -> dict[str, Any]:
        """The minimal Rollout dict ``compute_metrics`` needs (no trajectory: it does not read one)."""
        verdict = None
        if self.status == "scored" and self.reward is not None:
            verdict = {"reward": self.reward, "passed": self.passed, "answer": self.answer}
        return {"rollout_id": self.rollout_id, "task_id": self.task_id, "env": self.env, "agent": self.agent,
                "model": self.model, "repeat": self.repeat, "attempt": self.attempt,
                "outcome": {"status": self.status, "kind": self.kind}, "verdict": verdict}


def is_map(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, with the plain dict every journal value is tested first: the ABC
    check costs a Python-level call each time, and reports run it tens of times per record."""
    return type(value) is dict or isinstance(value, Mapping)


def as_map(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one: journal fields can be null or malformed."""
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def row_from_record(seq: int, rec: Mapping[str, Any]) -> Row:
    """Reduce a journal dict; tolerant of odd records (a report must not die on one bad line).

    Runs once per record at the end of every run, so the usual shapes (plain dicts, floats, ints, strs)
    are read on fast paths; anything else takes the general rule of ``_num``/``_int``/``as_map``."""
    get = rec.get
    outcome, trajectory = as_map(get("outcome")), as_map(get("trajectory"))
    verdict = get("verdict")
    if not is_map(verdict):
        verdict = None
    usage, timings_raw = as_map(get("usage")), as_map(get("timings"))
    timings: dict[str, float] = {}
    for k, value in timings_raw.items():
        if type(value) is float:
            timings[str(k)] = value
        elif (v := _num(value)) is not None:
            timings[str(k)] = v
    message = outcome.get("message")
    if not isinstance(message, str):
        message = None
    elif len(message) > _MESSAGE_CHARS:
        message = message[:_MESSAGE_CHARS] + "…"
    passed = answer = reward = None
    if verdict is not None:
        reward = _num(verdict.get("reward"))
        passed = verdict.get("passed")
        if not isinstance(passed, bool):
            passed = None
        answer = verdict.get("answer")
        if answer is not None:
            answer = str(answer)
    kind = outcome.get("kind")
    return Row(
        seq,
        _str(get("rollout_id", "")),
        _str(get("task_id", "")),
        _str(get("env", "")),
        _str(get("agent", "")),
        _str(get("model", "")),
        _int(get("repeat")),
        _int(get("attempt")),
        _str(outcome.get("status") or "unknown"),
        None if kind is None else _str(kind),
        message,
        reward,
        passed,
        answer,
        _int(trajectory.get("steps")),
        _int(usage.get("prompt_tokens")),
        _int(usage.get("completion_tokens")),
        timings,
    )


class Effective:
    """Which record counts for each (env, agent, model, task, repeat) slot, maintained as records arrive.

    The same rule as metrics: the last scored attempt, else the last attempt. A later record can demote
    an earlier one (a retry that scored), so ``add`` updates the loser's flag in place.
    """

    def __init__(self) -> None:
        self._best: dict[tuple[str, str, str, str, int], tuple[tuple[int, int, int], Row]] = {}

    def add(self, row: Row) -> None:
        rank = (1 if row.scored else 0, row.attempt, row.seq)
        current = self._best.get(row.slot)
        if current is None or rank > current[0]:
            if current is not None:
                current[1].effective = False
            row.effective = True
            self._best[row.slot] = (rank, row)
        else:
            row.effective = False

    def rows(self) -> list[Row]:
        return [row for _, row in self._best.values()]


@dataclass(frozen=True)
class Filter:
    """What the viewer can filter on; ``matches`` is mirrored by ``matches()`` in viewer.js."""

    task: str | None = None
    outcome: str = "all"
    min_reward: float | None = None
    max_reward: float | None = None
    effective_only: bool = False

    def __post_init__(self) -> None:
        base = self.outcome.split(":", 1)[0]
        if base not in OUTCOMES:
            raise ValueError(f"outcome filter {self.outcome!r} is not one of {', '.join(OUTCOMES)} "
                             "(or failed:KIND)")

    @property
    def empty(self) -> bool:
        return (not self.task and self.outcome == "all" and self.min_reward is None
                and self.max_reward is None and not self.effective_only)

    def matches(self, row: Row) -> bool:
        if self.task and row.task_id != self.task:
            return False
        if self.effective_only and not row.effective:
            return False
        if not _outcome_matches(self.outcome, row):
            return False
        if self.min_reward is not None or self.max_reward is not None:
            if row.reward is None or not row.scored:
                return False
            if self.min_reward is not None and row.reward < self.min_reward:
                return False
            if self.max_reward is not None and row.reward > self.max_reward:
                return False
        return True

    def apply(self, rows: Iterable[Row]) -> list[Row]:
        return [r for r in rows if self.matches(r)]


def _outcome_matches(outcome: str, row: Row) -> bool:
    base, _, kind = outcome.partition(":")
    if base == "all":
        return True
    if base == "scored":
        return row.scored
    if base == "passed":
        return row.is_pass
    if base == "not_passed":
        return row.scored and not row.is_pass
    if base == "unscored":
        return not row.scored
    if base == "timed_out":
        return row.status == "timed_out"
    # "failed": every non-scored record that is not a timeout; "failed:KIND" one kind of them
    return row.status == "failed" and (not kind or row.kind == kind)
