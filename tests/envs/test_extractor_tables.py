"""Hostile reply shapes for the answer extractors of json_schema and sql: the committed answer (the last
block or object) is graded, never an earlier draft or example standing in for a broken final one."""

from __future__ import annotations

from typing import Any

import pytest

from palaestra.core.records import Task, Trajectory
from palaestra.envs.json_schema.env import JSONSchema
from palaestra.envs.json_schema.extract import extract_json
from palaestra.envs.sql.env import extract_sql

INVALID = "invalid_json"
NONE = "no_json_found"

JSON_REPLIES: list[tuple[str, Any]] = [
    ('{"a": 1}', {"a": 1}),
    ('  [1, 2]  ', [1, 2]),
    ('Here:\n```json\n{"a": 1}\n```\nor better\n```json\n{"a": 2}\n```', {"a": 2}),
    ('Draft:\n```json\n{"a": 1}\n```\nFinal:\n```json\n{"a": 2,}\n```', INVALID),  # broken final, not the draft
    ('```bash\necho hi\n```\n```\n{"a": 3}\n```', {"a": 3}),  # a shell block is not JSON
    ('```json\n{"a": 1}\n```\n```bash\nrm -rf x\n```', {"a": 1}),
    ('I think {"a": {"b": "}"}} is it, not {broken', {"a": {"b": "}"}}),
    ('Example {"a": 1}; my answer: {"a": 2, oops}', INVALID),
    ('The set {1, 2} is the answer to part 1; JSON: {"a": 5}', {"a": 5}),
    ('My answer is {"a": 5}. (Here {x} is a placeholder.)', {"a": 5}),
    ("no json at all", NONE),
    ("", NONE),
]


@pytest.mark.parametrize(("text", "want"), JSON_REPLIES)
def test_json_reply_shapes(text: str, want: Any) -> None:
    value, found_by, reason = extract_json(text)
    if want in (INVALID, NONE):
        assert value is None and found_by is None and reason == want
    else:
        assert value == want and found_by is not None and reason is None


def test_a_broken_final_json_scores_as_broken_with_its_reason() -> None:
    env = JSONSchema()
    task = Task(id="j", env="json_schema", input="Give a.", metadata={
        "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        "expected": {"a": 2}})
    verdict = env.verify(task, Trajectory(final_answer='Draft {"a": 2}. Final: {"a": 2,,}'))
    assert verdict.reward == 0.0 and verdict.metadata["reason"] == INVALID and verdict.answer is None


SQL_REPLIES: list[tuple[str, str]] = [
    ("```sql\nSELECT 1;\n```", "SELECT 1"),
    ("Try:\n```sql\nSELECT 1\n```\nFinal:\n```sql\nSELECT 2;\n```", "SELECT 2"),
    ("```sql\nSELECT 1\n```\n```python\nprint(2)\n```", "SELECT 1"),  # the tagged block outranks others
    ("```\nSELECT 3\n```", "SELECT 3"),
    ("SELECT name FROM t;", "SELECT name FROM t"),
]


@pytest.mark.parametrize(("text", "want"), SQL_REPLIES)
def test_sql_reply_shapes(text: str, want: str) -> None:
    assert extract_sql(text) == want
