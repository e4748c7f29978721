"""Summary rows: the few fields of a journal record that metrics, lists, filters and charts need.

A journal line can be tens of kilobytes (every model request is in it), but metrics.json, the viewer's
table, its filters and every chart of the report only read a handful of scalars. Reducing each record to a
``Row`` once keeps 100,000 rollouts in a few tens of megabytes and gives metrics, the static report and
the live viewer one definition of "scored", "passed", "failed" and "effective". ``compute_metrics``
works on rows: a Rollout it is given becomes one (``row_from_rollout``), and the end of a run builds
them from the journal's records without making a Rollout of each (``counted_row``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard, get_args

from palaestra.core.records import OutcomeStatus

if TYPE_CHECKING:
    from palaestra.core.records import Rollout

__all__ = ["COLUMNS", "PHASES", "STATUSES", "Effective", "Row", "as_map", "counted_row", "is_map", "rollout_problem",
           "row_from_record", "row_from_rollout"]

# Phases in the order a rollout goes through them; other timing keys are appended after these.
PHASES = ("seed_s", "agent_s", "verify_s", "close_s", "total_s")

# The JSON form of a row is a list in this order (lists, not dicts: 100k rows stay a few MB smaller).
COLUMNS = ("seq", "rollout_id", "task_id", "group", "repeat", "attempt", "status", "kind", "reward",
           "passed", "steps", "prompt_tokens", "completion_tokens", "total_s", "effective", "message")

# An outcome's statuses (``core.records.OutcomeStatus``): a row with any other cannot count in metrics.
STATUSES = frozenset(get_args(OutcomeStatus))

_MESSAGE_CHARS = 500  # what a row keeps of a failure's message: metrics' failure examples quote this much
_SHOWN_CHARS = 200  # what the viewer's table shows of it


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
    tags: tuple[str, ...] = ()
    # Worked out once, as the row is made (a row's record never changes): metrics and the report ask a
    # dozen times per row, and a property is a Python call each time.
    scored: bool = field(init=False)
    is_pass: bool = field(init=False)  # the same rule as ``Verdict.is_pass``: ``passed`` if said, else reward >= 1

    def __post_init__(self) -> None:
        self.scored = scored = self.status == "scored" and self.reward is not None
        self.is_pass = scored and (self.passed if self.passed is not None else (self.reward or 0.0) >= 1.0)

    @property
    def group(self) -> str:
        return f"{self.env} · {self.agent} · {self.model}"

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
                1 if self.effective else 0, _shown(self.message)]


def _shown(message: str | None) -> str | None:
    if message is None or len(message) <= _SHOWN_CHARS:
        return message
    return message[:_SHOWN_CHARS] + "…"


def _cut(message: str | None) -> str | None:
    return message if message is None or len(message) <= _MESSAGE_CHARS else message[:_MESSAGE_CHARS]


def is_map(value: object) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, with the plain dict every journal value is tested first, and null
    second: the ABC check costs a Python-level call each time, and reports run it tens of times per record."""
    return type(value) is dict or (value is not None and isinstance(value, Mapping))


def as_map(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one: journal fields can be null or malformed."""
    return value if type(value) is dict or (value is not None and isinstance(value, Mapping)) else {}


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
    message = _cut(message) if isinstance(message, str) else None
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
        True,
        _tags(get("tags")),
    )


def _tags(value: Any) -> tuple[str, ...]:
    if type(value) is list:
        return tuple(v if type(v) is str else str(v) for v in value)
    return ()


def row_from_rollout(seq: int, r: Rollout) -> Row:
    """The row of a Rollout (validated already): the same values ``row_from_record`` reads from its JSON."""
    verdict, outcome = r.verdict, r.outcome
    return Row(seq, r.rollout_id, r.task_id, r.env, r.agent, r.model, r.repeat, r.attempt, outcome.status,
               outcome.kind, _cut(outcome.message),
               None if verdict is None else float(verdict.reward), None if verdict is None else verdict.passed,
               None if verdict is None else verdict.answer, r.trajectory.steps, r.usage.prompt_tokens,
               r.usage.completion_tokens, dict(r.timings), True, tuple(r.tags))


def rollout_problem(exc: ValueError) -> str:
    """Why a record is not a Rollout, as its validation said: the first error's field and message."""
    errors = getattr(exc, "errors", None)
    first = errors()[0] if callable(errors) and errors() else None
    return f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first else str(exc)[:200]


def _opt_str(value: Any) -> bool:
    return value is None or type(value) is str


def _number(value: Any) -> bool:
    return type(value) is float or type(value) is int


def counted_row(seq: int, rec: Mapping[str, Any]) -> Row | None:
    """The record's row when every field a row reads has exactly the JSON type a Rollout writes it with (the
    journal's own records always do); None when only pydantic can say what the record is (a value it
    would coerce, or refuse), so the caller validates that one as a Rollout instead.

    This is the check of a record read back at the end of a run, which is what its numbers come from:
    ids, outcome, verdict, token counts, timings and tags. Of the trajectory only the step count is read;
    the rest of it counts in no number (the report reads it tolerantly)."""
    get = rec.get
    rid, task_id, env, agent, model = get("rollout_id"), get("task_id"), get("env"), get("agent"), get("model")
    repeat, attempt, outcome = get("repeat", 0), get("attempt", 0), get("outcome")
    if not (type(rid) is str and type(task_id) is str and type(env) is str and type(agent) is str
            and type(model) is str and type(repeat) is int and type(attempt) is int and type(outcome) is dict):
        return None
    status, kind, message = outcome.get("status"), outcome.get("kind"), outcome.get("message")
    if type(status) is not str or status not in STATUSES or not _opt_str(kind) or not _opt_str(message):
        return None
    verdict = get("verdict")
    reward: float | None = None
    passed = answer = None
    if verdict is not None:
        if type(verdict) is not dict:
            return None
        raw, passed, answer = verdict.get("reward"), verdict.get("passed"), verdict.get("answer")
        components, metadata = verdict.get("components", {}), verdict.get("metadata", {})
        if not ((type(raw) is float or type(raw) is int) and (passed is None or type(passed) is bool)
                and _opt_str(answer) and type(components) is dict and type(metadata) is dict
                and all(type(k) is str and _number(v) for k, v in components.items())):
            return None
        reward = float(raw)
    traj, usage, timings = get("trajectory", {}), get("usage", {}), get("timings", {})
    if type(traj) is not dict or type(usage) is not dict or type(timings) is not dict:
        return None
    steps, prompt, completion = traj.get("steps", 0), usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    tags = get("tags", [])
    if not (type(steps) is int and type(prompt) is int and type(completion) is int and type(tags) is list
            and _number(get("started_at", 0.0)) and type(get("schema_version", 0)) is int):
        return None
    if not all(type(v) is float for v in timings.values()):  # ints are read as floats, as pydantic does
        if not all(_number(v) for v in timings.values()):
            return None
        timings = {k: float(v) for k, v in timings.items()}
    for tag in tags:
        if type(tag) is not str:
            return None
    return Row(seq, rid, task_id, env, agent, model, repeat, attempt, status, kind, _cut(message), reward, passed,
               answer, steps, prompt, completion, timings, True, tuple(tags))


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
