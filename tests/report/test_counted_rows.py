"""Summary rows (``metrics.rows``) as metrics read them: the end of a run counts a journal record as its row
without building a Rollout of it (``counted_row``), so that row must be exactly the one a validated
Rollout gives, and every record pydantic would coerce or refuse must be left to pydantic."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from palaestra.core.records import Rollout
from palaestra.metrics.rows import counted_row, row_from_record, row_from_rollout
from palaestra.metrics.summary import compute_metrics
from palaestra.orchestrator import write_metrics
from palaestra.rollout.compact import RunTasks, expand_record
from palaestra.rollout.results import read_rollouts, read_run_journal
from palaestra.rollout.tasks import read_tasks

from .conftest import mixed_records, rollout, write_run


def _records(run: Path) -> list[dict[str, Any]]:
    tasks = RunTasks(run / "tasks.jsonl")
    return [expand_record(orjson.loads(line), tasks) for line in (run / "rollouts.jsonl").read_bytes().splitlines()]


def test_a_journal_record_counts_as_the_row_its_rollout_gives(real_run: Path) -> None:
    records = _records(real_run)
    assert len(records) > 8 and {r["outcome"]["status"] for r in records} >= {"scored", "failed"}
    for seq, rec in enumerate(records):
        row = counted_row(seq, rec)
        assert row is not None, rec
        assert row == row_from_rollout(seq, Rollout.model_validate(rec))


def test_a_long_failure_message_is_kept_for_metrics_and_cut_for_the_table() -> None:
    rec = rollout("t", kind="model")
    rec["outcome"]["message"] = "x" * 900
    row = counted_row(0, rec)
    assert row is not None and row.message == "x" * 500  # metrics' failure examples quote 500 characters
    shown = row.to_json({})[-1]
    assert shown == "x" * 200 + "…"
    assert compute_metrics([row])["failure_examples"]["model"]["message"] == "x" * 500


# Each edit makes a record pydantic would read differently (a value it coerces) or refuse.
ODD: list[tuple[str, Any]] = [
    ("repeat", "1"), ("attempt", 1.0), ("repeat", True), ("task_id", 7), ("env", None),
    ("outcome", {"status": "done"}), ("outcome", {"status": "failed", "kind": 3}), ("outcome", "scored"),
    ("verdict", {"reward": "0.5"}), ("verdict", {"reward": True}), ("verdict", {"reward": 1.0, "passed": "yes"}),
    ("verdict", {"reward": 1.0, "answer": 2}), ("verdict", {"reward": 1.0, "components": {"c": "high"}}),
    ("verdict", {"reward": 1.0, "metadata": []}), ("verdict", [1.0]), ("trajectory", [1]),
    ("usage", {"prompt_tokens": "9"}),
    ("timings", {"total_s": "1"}), ("timings", {"seed_s": 1, "total_s": "1"}), ("timings", []),
    ("tags", ["a", 1]), ("tags", "a"), ("started_at", "now"),
    ("schema_version", "2"),
]


@pytest.mark.parametrize(("key", "value"), ODD, ids=[f"{k}={v!r}" for k, v in ODD])
def test_a_record_only_pydantic_can_read_is_left_to_it(key: str, value: Any) -> None:
    rec = rollout("t")
    assert counted_row(0, rec) is not None
    rec[key] = value
    assert counted_row(0, rec) is None


def test_metrics_from_counted_rows_equal_metrics_from_validated_rollouts(tmp_path: Path) -> None:
    """The end of a run's metrics (counted rows, Rollouts only where pydantic must decide) and the same
    journal validated record by record agree, on clean records and on records pydantic coerces or refuses."""
    records = mixed_records()
    coerced = copy.deepcopy(records[2])
    coerced.update(rollout_id="coerced", repeat="1", task_id="gamma")  # pydantic reads "1" as 1
    refused = {**copy.deepcopy(records[3]), "rollout_id": "refused", "outcome": {"status": "done"}}
    run = write_run(tmp_path / "run", [*records, coerced, refused])
    tasks = read_tasks(run / "tasks.jsonl")
    read = read_run_journal(run / "rollouts.jsonl")
    assert len(read.counted) == len(records) + 1 and len(read.invalid) == 1
    assert any(r.rollout_id == "coerced" and r.repeat == 1 for r in read.counted)
    _, rollouts, _, invalid = read_rollouts(run / "rollouts.jsonl")
    assert len(rollouts) == len(read.counted) and len(invalid) == 1
    light = write_metrics(run, tasks, 2, journal=read)
    shutil.copy(run / "metrics.json", tmp_path / "light.json")
    full = compute_metrics(rollouts, {(t.env, t.id): 2 for t in tasks})
    for key in ("overall", "groups", "per_task", "failure_examples"):
        assert light[key] == full[key], key
    assert light["token_fidelity"]["checked_turns"] > 0  # the record with token ids was read as a Rollout


def test_the_viewers_rows_of_a_status_no_rollout_has_are_invalid_in_metrics() -> None:
    good, odd = rollout("a"), {**rollout("b"), "outcome": {"status": "paused"}}
    metrics = compute_metrics([row_from_record(0, good), row_from_record(1, odd)])
    assert metrics["overall"]["n_rollouts_scored"] == 1
    assert len(metrics["invalid_records"]) == 1 and "paused" in metrics["invalid_records"][0]
