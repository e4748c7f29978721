"""``rollout.plain.rollout_data``: the journal's dump of a Rollout without pydantic's serializer must give
the very JSON pydantic gives, and step aside (None) for anything it cannot vouch for."""

from __future__ import annotations

import dataclasses
import datetime
import math

import orjson

from palaestra.core.records import (
    ModelCallRecord,
    Outcome,
    Rollout,
    Task,
    ToolCallRecord,
    Trajectory,
    Usage,
    Verdict,
)
from palaestra.rollout.compact import compact_record, compact_rollout, journal_forms
from palaestra.rollout.journal import encode_record
from palaestra.rollout.plain import rollout_data

PROMPT = "Reschedule the design review to Thursday at 10:00 and tell every attendee. " * 4


def _rollout(**extra: object) -> Rollout:
    messages = [{"role": "system", "content": "You work at Northwind."}, {"role": "user", "content": PROMPT}]
    tools = [{"type": "function", "function": {"name": "list_events", "parameters": {"type": "object"}}}]
    call = {"id": "c1", "type": "function", "function": {"name": "list_events", "arguments": "{}"}}
    first = ModelCallRecord(
        request={"messages": list(messages), "tools": tools, "seed": 7},
        response={"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]},
        status=200,
        usage={"prompt_tokens": 30},
        prompt_token_ids=list(range(40)),
        generation_token_ids=[1, 2],
        token_capture="ids",
        served_by="replica-2",
    )
    turn = [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "[]"},
    ]
    second = ModelCallRecord(
        request={"messages": turn, "tools": tools},
        response={"choices": [{"message": {"role": "assistant", "content": "done"}}]},
        status=200,
        prompt_token_ids=[*range(40), 1, 2, 9],
        latency_s=0.25,
    )
    traj = Trajectory(
        messages=[*turn, {"role": "assistant", "content": "done"}],
        final_answer="done",
        steps=2,
        stop_reason="final",
        model_calls=[first, second],
        tool_calls=[ToolCallRecord(name="list_events", arguments={}, call_id="c1", output=[])],
    )
    return Rollout(
        rollout_id="r1",
        task_id="t1",
        env="workplace",
        agent="tool",
        model="m",
        outcome=Outcome.scored(),
        verdict=Verdict(reward=0.5, components={"a": 1.0}, metadata={"failed": {"b": "0 rows"}}),
        trajectory=traj,
        usage=Usage(model_calls=2, tool_calls=1),
        timings={"total_s": math.nan},
        tags=["x"],
        **extra,
    )


def _task() -> Task:
    return Task(id="t1", env="workplace", input=PROMPT)


def test_same_json_as_pydantic_and_same_journal_line() -> None:
    rollout = _rollout(note="an extra field")  # extra fields come after the declared ones, as pydantic puts them
    data = rollout_data(rollout)
    expected = rollout.model_dump(mode="json")
    assert data is not None
    assert orjson.dumps(data) == orjson.dumps(expected)  # same keys, order and values (NaN written as null)
    assert list(data["trajectory"]["model_calls"][0]) == list(expected["trajectory"]["model_calls"][0])
    before = encode_record(compact_record(rollout.model_dump(mode="json"), _task(), source=rollout))
    after = encode_record(compact_rollout(rollout, _task()))
    assert after == before
    assert b'"$prefix"' in after  # and it was compacted: the second call's messages reference the first's
    record, full, line = journal_forms(rollout, _task())
    assert line == after == encode_record(record)  # the line the check encoded is the journal's, byte for byte
    assert full is not None and orjson.dumps(full) == orjson.dumps(expected)


def test_compaction_leaves_the_rollout_untouched() -> None:
    rollout = _rollout()
    snapshot = rollout.model_dump(mode="json")
    compact_rollout(rollout, _task())
    assert orjson.dumps(rollout.model_dump(mode="json")) == orjson.dumps(snapshot)


@dataclasses.dataclass
class _Point:
    x: int


def test_anything_but_plain_data_falls_back_to_pydantic() -> None:
    odd = [
        {"seen": {"a", "b"}},
        {"at": datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc)},
        {"point": _Point(1)},
        {"model": Usage()},
        {1: "int key"},
    ]
    for metadata in odd:
        rollout = _rollout()
        rollout.verdict.metadata = metadata  # type: ignore[union-attr]
        assert rollout_data(rollout) is None, metadata
    rollout = _rollout()
    rollout.verdict.metadata = {"at": datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc)}  # type: ignore[union-attr]
    line = encode_record(compact_rollout(rollout, _task()))
    assert orjson.loads(line)["verdict"]["metadata"]["at"] == "2026-12-02T00:00:00Z"  # pydantic's form, as before
    assert journal_forms(rollout, _task())[2] is None  # no line from the check: the journal encodes pydantic's form


def test_a_subclass_is_dumped_by_pydantic() -> None:
    class Wider(Trajectory):
        secret: str = "kept out by the declared type"

    rollout = _rollout()
    rollout.trajectory = Wider(messages=[{"role": "user", "content": "hi"}])
    assert rollout_data(rollout) is None


def test_task_lines_are_pydantic_dumps_byte_for_byte() -> None:
    from palaestra.rollout.tasks import task_line

    tasks = [
        Task(id="a", env="mcqa", input="Q?", metadata={"options": {"A": "x", "B": None}, "expected_answer": "A"}),
        Task(id="b", env="workplace", input=[{"role": "user", "content": "hi", "name": None}], agent=None,
             tools=[{"type": "function", "function": {"name": "f"}}], tags=["t"], note="extra", gone=None),
        Task(id="c", metadata={"at": datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc), "n": math.inf}),
        Task(id="d", metadata={"t": (1, 2), "f": 0.1}, model="m"),
    ]
    for task in tasks:
        expected = orjson.dumps(task.model_dump(mode="json", exclude_none=True), option=orjson.OPT_APPEND_NEWLINE)
        assert task_line(task) == expected, task.id
