"""Hostile journals: ``read_journal``/``repair``/``Journal`` on arbitrary bytes (torn lines, binary junk),
and the metrics computed from arbitrary journal records.

Promise under test: reading a damaged journal reports problems and never raises; every well-formed
record survives, in order; the journal accepts appends after any damage (resume); ``compute_metrics``
never raises on arbitrary dict records and its result can be written as ``metrics.json``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from fuzz_strategies import FLOATS, INTEGERS, JSON, JSON_OBJECTS, STRINGS, ci, long, shaped_dict, weighted
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from palaestra.core.records import Rollout
from palaestra.metrics.summary import compute_metrics
from palaestra.metrics.usage import model_usage
from palaestra.orchestrator import write_metrics
from palaestra.rollout.journal import Journal
from palaestra.rollout.journal_read import read_journal

# ---- journal files ---------------------------------------------------------------------------------
RECORD = JSON_OBJECTS.map(lambda d: {"rollout_id": "r", **d})
SEGMENT = weighted(
    (4, RECORD.map(lambda r: ("record", orjson.dumps(r) + b"\n"))),
    (2, st.binary(max_size=80).map(lambda b: ("junk", b.replace(b"\n", b"") + b"\n"))),
    (1, JSON.filter(lambda v: not isinstance(v, dict)).map(lambda v: ("junk", orjson.dumps(v) + b"\n"))),
    (1, st.sampled_from([b"\n", b"   \n", b"\r\n", b"\t\n"]).map(lambda b: ("blank", b))),
    (1, RECORD.map(lambda r: ("junk", orjson.dumps(r)[: max(1, len(orjson.dumps(r)) // 2)] + b"\n"))),
)
TAIL = st.one_of(st.just(b""), st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
                 RECORD.map(lambda r: orjson.dumps(r)[:-1]), RECORD.map(orjson.dumps))
FILES = st.tuples(st.lists(SEGMENT, max_size=8), TAIL)


def _build(tmp: Path, segments: list[tuple[str, bytes]], tail: bytes) -> Path:
    path = tmp / "rollouts.jsonl"
    path.write_bytes(b"".join(data for _, data in segments) + tail)
    return path


def _check_read(tmp: Path, segments: list[tuple[str, bytes]], tail: bytes) -> None:
    path = _build(tmp, segments, tail)
    records, problems = read_journal(path)
    written = [orjson.loads(data) for kind, data in segments if kind == "record"]
    # Junk bytes may happen to be a JSON object; those count as records too, in file order.
    expected = []
    for kind, data in segments:
        if kind == "record":
            expected.append(orjson.loads(data))
        elif kind == "junk":
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, dict):
                expected.append(value)
    assert records == expected and all(r in records for r in written)
    n_lines = len(segments) + (1 if tail else 0)
    for p in problems:
        assert p.startswith(f"{path}:"), p
        line = int(p[len(str(path)) + 1:].split(":", 1)[0])
        assert 1 <= line <= n_lines
    bad_lines = sum(1 for kind, data in segments if kind == "junk" and data.strip() and not _is_object(data))
    assert len(problems) == bad_lines + (1 if tail else 0), problems


def _is_object(data: bytes) -> bool:
    try:
        return isinstance(orjson.loads(data), dict)
    except orjson.JSONDecodeError:
        return False


def _check_resume(tmp: Path, segments: list[tuple[str, bytes]], tail: bytes) -> None:
    path = _build(tmp, segments, tail)
    before, _ = read_journal(path)

    async def append() -> None:
        async with Journal(path) as journal:
            await journal.append({"rollout_id": "new", "n": 1})

    asyncio.run(append())
    after, problems = read_journal(path)
    assert after == [*before, {"rollout_id": "new", "n": 1}]
    assert not any("torn" in p for p in problems), problems


def _journal_property(cfg: settings, tmp: Path, check: Any) -> None:
    @cfg
    @given(FILES)
    def prop(file: tuple[list[tuple[str, bytes]], bytes]) -> None:
        check(tmp, *file)

    prop()


def test_read_journal_keeps_every_record_and_reports_every_bad_line(tmp_path: Path) -> None:
    _journal_property(ci(100), tmp_path, _check_read)


def test_journal_resumes_after_any_damage(tmp_path: Path) -> None:
    _journal_property(ci(60), tmp_path, _check_resume)


@pytest.mark.fuzz
@pytest.mark.timeout(3600)
def test_read_journal_long(tmp_path: Path) -> None:
    _journal_property(long(10000), tmp_path, _check_read)


@pytest.mark.fuzz
@pytest.mark.timeout(3600)
def test_journal_resume_long(tmp_path: Path) -> None:
    _journal_property(long(3000), tmp_path, _check_resume)


def test_binary_journal_is_reported_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b'{"a": 1}\n\x00\xff\xfe\n' + bytes(range(11, 256)) + b"\n" + b'{"b": 2}\n' + b'{"c":')
    records, problems = read_journal(path)
    assert records == [{"a": 1}, {"b": 2}]
    assert [p.split(":")[1] for p in problems] == ["2", "3", "5"] and "torn last line" in problems[-1]


# ---- records -> metrics ----------------------------------------------------------------------------
REWARD = FLOATS | INTEGERS | st.sampled_from([0.0, 0.5, 1.0]) | STRINGS | st.none() | st.booleans()
VERDICT = shaped_dict({"reward": REWARD, "passed": st.booleans() | st.none(), "components": JSON,
                       "answer": STRINGS | st.none(), "metadata": JSON})
OUTCOME = shaped_dict({"status": st.sampled_from(["scored", "failed", "timed_out"]) | STRINGS,
                       "kind": st.sampled_from(["model", "environment"]) | STRINGS | st.none(), "message": STRINGS})
MODEL_CALL = shaped_dict({"usage": shaped_dict({"prompt_tokens": INTEGERS, "completion_tokens": INTEGERS}),
                          "routed_to": STRINGS})
ROLLOUT = shaped_dict({
    "schema_version": st.just(1), "rollout_id": STRINGS, "task_id": st.sampled_from(["a", "b", "c"]) | STRINGS,
    "env": st.sampled_from(["mcqa", "no_such_env"]), "agent": st.just("tool"), "model": st.sampled_from(["m1", "m2"]),
    "repeat": st.integers(0, 5) | INTEGERS, "attempt": st.integers(0, 3) | INTEGERS, "outcome": OUTCOME,
    "verdict": VERDICT | st.none(), "trajectory": shaped_dict({"model_calls": st.lists(MODEL_CALL, max_size=2)}),
    "tags": st.lists(STRINGS, max_size=2),
}, extra=False)
RECORDS = st.lists(weighted((4, ROLLOUT), (1, JSON_OBJECTS)), max_size=12)


def _valid(record: dict[str, Any]) -> bool:
    try:
        Rollout.model_validate(record)
    except ValidationError:
        return False
    return True


def _metrics_property(cfg: settings) -> None:
    @cfg
    @given(RECORDS, st.sampled_from([("env", "agent", "model"), ("model",), ("tags",), ()]))
    def prop(records: list[dict[str, Any]], group_by: tuple[str, ...]) -> None:
        metrics = compute_metrics(records, group_by=group_by, n_boot=20)
        orjson.dumps(metrics, option=orjson.OPT_INDENT_2)  # metrics.json
        n_valid = sum(1 for r in records if _valid(r))
        assert len(metrics["invalid_records"]) == len(records) - n_valid
        assert metrics["overall"]["n_rollouts_scored"] <= n_valid

    prop()


def test_compute_metrics_never_raises_on_arbitrary_records() -> None:
    _metrics_property(ci(70))


@pytest.mark.fuzz
@pytest.mark.timeout(3600)
def test_compute_metrics_long() -> None:
    _metrics_property(long(5000))


# ---- bugs this suite found, kept as regression tests ---------------------------------------------------
USAGE_BUG = (
    "BUG metrics/usage.py model_usage (called by rollout/collector.py write_metrics, i.e. at the end of every "
    "eval run and by `report`) trusts the shape of journal records: trajectory/model_calls/usage that are not "
    "objects raise AttributeError/TypeError, a non-string model or routed_to raises TypeError (unhashable), a "
    "non-numeric token count raises ValueError/TypeError; one odd record costs the run its metrics.json. "
    "Expected: skip (and report) records it cannot read, as compute_metrics does")
USAGE_CASES = [
    {"trajectory": [1]},
    {"trajectory": {"model_calls": 5}},
    {"trajectory": {"model_calls": [None]}},
    {"trajectory": {"model_calls": [{"usage": [1]}]}},
    {"trajectory": {"model_calls": [{"usage": {"prompt_tokens": "many"}}]}},
    {"trajectory": {"model_calls": [{"usage": {"completion_tokens": {"n": 1}}}]}},
    {"model": ["m"], "trajectory": {"model_calls": [{}]}},
    {"trajectory": {"model_calls": [{"routed_to": {"m": 1}}]}},
]



@pytest.mark.parametrize("record", USAGE_CASES, ids=[f"case{i}" for i in range(len(USAGE_CASES))])
def test_model_usage_skips_unreadable_records(record: dict[str, Any]) -> None:
    usage = model_usage([record, {"model": "m", "trajectory": {"model_calls": [{"usage": {"prompt_tokens": 3}}]}}])
    assert usage["m"]["prompt_tokens"] == 3



def test_write_metrics_survives_an_odd_journal_record(tmp_path: Path) -> None:
    (tmp_path / "rollouts.jsonl").write_bytes(orjson.dumps({"rollout_id": "x", "trajectory": [1]}) + b"\n")
    metrics = write_metrics(tmp_path, [], 1)
    assert metrics["invalid_records"] and (tmp_path / "metrics.json").is_file()
