"""The viewer's filters over summary rows (``metrics.rows``): which rows a query keeps.

``Filter.matches`` is mirrored by ``matches()`` in viewer.js, so the live viewer and the static report
filter alike."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from palaestra.metrics.rows import Row

__all__ = ["OUTCOMES", "Filter"]

# Values the outcome filter accepts: "failed:KIND" narrows "failed" to one kind.
OUTCOMES = ("all", "scored", "passed", "not_passed", "failed", "timed_out", "unscored")


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
