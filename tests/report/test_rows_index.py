"""Summary rows, the effective-attempt rule, filters, and the incremental journal index."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from palaestra.metrics.rows import row_from_record
from palaestra.report.detail import rollout_detail
from palaestra.report.index import JournalIndex
from palaestra.report.rows import Filter
from palaestra.report.tokens import token_view

from .conftest import XSS, mixed_records, rollout, token_calls, write_run


def _index(run: Path) -> JournalIndex:
    idx = JournalIndex(run / "rollouts.jsonl")
    assert idx.advance() is True
    return idx


def test_rows_and_effective_rule(mixed_run: Path) -> None:
    idx = _index(mixed_run)
    rows = idx.rows
    assert len(rows) == len(mixed_records())
    gamma = [r for r in rows if r.task_id == "gamma" and r.repeat == 0]
    assert [(r.attempt, r.status, r.effective) for r in gamma] == [(0, "failed", False), (1, "scored", True)]
    delta0 = next(r for r in rows if r.task_id == "delta" and r.repeat == 0)
    assert delta0.effective and delta0.failure_kind == "sandbox" and not delta0.scored
    beta1 = next(r for r in rows if r.task_id == "beta" and r.repeat == 1)
    assert beta1.scored and not beta1.is_pass and beta1.reward == 0.0
    assert rows[0].timings["total_s"] == pytest.approx(0.25)


def test_odd_records_do_not_crash_rows() -> None:
    row = row_from_record(0, {"task_id": 7, "outcome": None, "verdict": "x", "timings": {"a": "slow"}})
    assert row.task_id == "7" and row.status == "unknown" and row.reward is None and row.timings == {}
    assert not row.scored and row.failure_kind == "unknown"


def test_rows_read_odd_values_by_the_general_rules() -> None:
    long = row_from_record(1, {"outcome": {"status": "failed", "kind": 3, "message": "x" * 500}, "verdict": {},
                               "repeat": 2.7, "attempt": True, "timings": {"a": 1, "b": True, "c": 2.5, "d": "9"}})
    assert (long.status, long.kind, long.repeat, long.attempt) == ("failed", "3", 2, 0)
    assert long.message == "x" * 500 and long.to_json({})[-1] == "x" * 200 + "…"  # kept for metrics, cut for the table
    assert long.timings == {"a": 1.0, "c": 2.5}
    assert (long.reward, long.passed, long.answer) == (None, None, None)  # an empty verdict says nothing
    odd = row_from_record(2, {"outcome": {"status": "", "message": 5}, "usage": [], "trajectory": {"steps": "3"},
                              "verdict": {"reward": True, "passed": 1, "answer": 3}})
    assert (odd.status, odd.message, odd.steps, odd.prompt_tokens) == ("unknown", None, 0, 0)
    assert (odd.reward, odd.passed, odd.answer) == (None, None, "3")  # a bool is no reward, 1 no verdict
    fine = row_from_record(3, {"verdict": {"reward": 0.5, "passed": False}, "usage": {"prompt_tokens": 4.9},
                               "outcome": {"status": "scored"}, "rollout_id": "r", "task_id": "t"})
    assert (fine.reward, fine.passed, fine.prompt_tokens, fine.rollout_id, fine.task_id) == (0.5, False, 4, "r", "t")


@pytest.mark.parametrize(("flt", "expected"), [
    (Filter(), 9),
    (Filter(outcome="passed"), 4),
    (Filter(outcome="failed"), 2),
    (Filter(outcome="failed:sandbox"), 1),
    (Filter(outcome="not_passed"), 3),
    (Filter(task="gamma"), 3),
    (Filter(task="gamma", effective_only=True), 2),
    (Filter(min_reward=0.2, max_reward=0.6), 2),
])
def test_filters(mixed_run: Path, flt: Filter, expected: int) -> None:
    idx = _index(mixed_run)
    page, matched = idx.query(flt, 0, 50)
    assert matched == expected and len(page) == expected
    assert all(flt.matches(r) for r in page)


def test_filter_rejects_unknown_outcome() -> None:
    with pytest.raises(ValueError, match="outcome filter 'nope'"):
        Filter(outcome="nope")


def test_index_pages_and_follows_appends(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", [rollout(f"t{i}") for i in range(120)])
    journal = run / "rollouts.jsonl"
    idx = JournalIndex(journal)
    idx.ensure(50)
    assert 50 <= len(idx.rows) < 120  # the first page needs no full scan
    page, _ = idx.query(Filter(), 100, 50)
    assert len(page) == 0 or page[0].seq == 100
    idx.advance()
    assert len(idx.rows) == 120 and idx.complete
    # a line still being written is not consumed; once finished it is
    tail = orjson.dumps(rollout("late")) + b"\n"
    with journal.open("ab") as fh:
        fh.write(tail[:40])
    version = idx.version
    assert idx.advance() is True and len(idx.rows) == 120 and idx.version == version
    with journal.open("ab") as fh:
        fh.write(tail[40:])
    idx.advance()
    assert len(idx.rows) == 121 and idx.rows[-1].task_id == "late" and idx.version > version
    assert idx.read_record(120)["task_id"] == "late"
    # a journal that shrank (repaired or replaced) is indexed again from the start
    journal.write_bytes(orjson.dumps(rollout("only")) + b"\n")
    idx.advance()
    assert [r.task_id for r in idx.rows] == ["only"]


def test_index_skips_invalid_lines(tmp_path: Path) -> None:
    journal = tmp_path / "rollouts.jsonl"
    journal.write_bytes(orjson.dumps(rollout("a")) + b"\n{not json\n[1, 2]\n\n" + orjson.dumps(rollout("b")) + b"\n")
    idx = JournalIndex(journal)
    idx.advance()
    assert [r.task_id for r in idx.rows] == ["a", "b"]
    assert len(idx.problems) == 2 and ":2: invalid JSON" in idx.problems[0]
    assert idx.read_record(1)["task_id"] == "b"
    with pytest.raises(IndexError, match="no rollout #5"):
        idx.read_record(5)


def test_token_view_mask_and_drift() -> None:
    tv = token_view(token_calls())
    assert tv is not None
    assert [t["pieces"] for t in tv["turns"]] == [["Hel", "lo"], [" wor", "ld", "<b>!</b>"]]
    assert tv["turns"][1]["drift"] is False and tv["drifted_turns"] == 0 and tv["checked_turns"] == 1
    seq = tv["sequence"]
    assert seq["ids"] == [1, 2, 3, 10, 11, 20, 21, 30, 31, 32]
    assert seq["mask_spans"] == [[3, 5, 0], [7, 10, 1]]  # loss mask 1 exactly on generated tokens
    assert tv["n_generated"] == 5 and tv["min_logprob"] == -4.0

    drifted = token_view(token_calls(drift=True))
    assert drifted is not None
    assert drifted["turns"][1]["drift"] is True and drifted["turns"][1]["drift_at"] == 2
    assert drifted["sequence"] is None and drifted["drifted_turns"] == 1
    assert token_view([{"api": "chat", "response": {"choices": [{"message": {}}]}}]) is None


def test_detail_keeps_content_as_data_and_clips() -> None:
    rec = rollout("x", content=XSS + "y" * 30)
    rec["trajectory"]["tool_calls"][0]["output"] = "z" * 50
    d = rollout_detail(rec, 3, max_chars=40)
    assert d["seq"] == 3 and d["messages"][1]["content"].startswith(XSS[:40])
    assert "more characters not shown" in d["messages"][1]["content"]
    assert d["messages"][2]["tool_calls"][0] == {"id": "c1", "name": "lookup", "arguments": '{\n  "q": "x"\n}'}
    assert d["tool_calls"][0]["t"] == pytest.approx(0.01) and d["verdict"]["reward"] == 1.0
    assert d["tokens"] is None and d["outcome"]["status"] == "scored"
