from __future__ import annotations

import pytest

from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task, Trajectory
from palaestra.envs.json_schema.env import JSONSchema
from palaestra.envs.json_schema.extract import find_json, is_missing, lookup, same

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                   "tags": {"type": "array", "items": {"type": "string"}},
                   "address": {"type": "object", "properties": {"city": {"type": "string"}}}},
    "required": ["name", "age"],
}


def _task(**meta: object) -> Task:
    return Task(id="t", env="json_schema", input="Describe Ada.",
                metadata={"schema": SCHEMA, "expected": {"name": "Ada", "age": 36, "address.city": "London"}, **meta})


def _verify(text: str, **meta: object):  # type: ignore[no-untyped-def]
    return JSONSchema().verify(_task(**meta), Trajectory(final_answer=text))


def test_bundled_tasks_reference_passes_and_null_scores_zero() -> None:
    env = JSONSchema()
    tasks = env.examples()
    assert len(tasks) >= 20
    for task in tasks:
        env.check_task(task)
        ref = env.reference(task)
        assert ref is not None and ref.final_answer
        verdict = env.verify(task, Trajectory(final_answer=ref.final_answer))
        assert verdict.reward == 1.0 and verdict.passed, (task.id, verdict.metadata)
        assert env.verify(task, Trajectory(final_answer="")).reward == 0.0


def test_json_is_found_whole_fenced_or_embedded() -> None:
    assert find_json('{"a": 1}') == ({"a": 1}, "whole")
    assert find_json('Here:\n```json\n{"a": 1}\n```\nor\n```\n{"a": 2}\n```') == ({"a": 2}, "fenced")
    assert find_json('I think {"a": {"b": "}"}} is it, not {broken') == ({"a": {"b": "}"}}, "embedded")
    assert find_json("no json at all") == (None, None)


def test_full_marks_need_parse_schema_and_values() -> None:
    good = _verify('Sure:\n```json\n{"name": "Ada", "age": 36, "address": {"city": "London"}}\n```')
    assert good.reward == 1.0 and good.passed
    assert good.components == {"parse": 1.0, "schema": 1.0, "values": 1.0}
    assert good.answer == '{"address": {"city": "London"}, "age": 36, "name": "Ada"}'


def test_schema_violation_and_wrong_values_are_reported() -> None:
    verdict = _verify('{"name": "Ada", "age": "36", "address": {"city": "Paris"}}')
    assert verdict.components == {"parse": 1.0, "schema": 0.0, "values": pytest.approx(1 / 3)}
    assert verdict.reward == pytest.approx((1 + 0 + 1 / 3) / 3) and not verdict.passed
    assert verdict.metadata["schema_errors"] == ["age: '36' is not of type 'integer'"]
    assert verdict.metadata["wrong_values"] == {"age": "36", "address.city": "Paris"}


def test_no_json_scores_zero_with_a_reason() -> None:
    verdict = _verify("Ada is 36 and lives in London.")
    assert verdict.reward == 0.0 and verdict.metadata == {"reason": "no_json_found"}


def test_values_compare_typed_and_strings_optionally_normalised() -> None:
    assert same(36, 36.0) and not same(1, True) and not same("36", 36)
    assert not same("London", " london ") and same("London", " london ", normalize_strings=True)
    loose = _verify('{"name": " ada ", "age": 36.0, "address": {"city": "LONDON"}}', normalize_strings=True)
    assert loose.passed
    strict = _verify('{"name": " ada ", "age": 36.0, "address": {"city": "LONDON"}}')
    assert strict.components["values"] == pytest.approx(1 / 3)


def test_paths_support_indexes_and_json_pointer() -> None:
    value = {"tags": ["x", "y"], "a/b": {"c": 1}}
    assert lookup(value, "tags[1]") == "y"
    assert lookup(value, "/tags/0") == "x"
    assert lookup(value, "/a~1b/c") == 1
    assert is_missing(lookup(value, "tags[5]")) and is_missing(lookup(value, "nope.x"))


def test_an_invalid_schema_or_expected_is_an_invalid_task() -> None:
    env = JSONSchema()
    with pytest.raises(InvalidTask, match="not a valid JSON Schema"):
        env.check_task(Task(id="t", metadata={"schema": {"type": "nonsense"}}))
    with pytest.raises(InvalidTask, match="no metadata.schema"):
        env.check_task(Task(id="t", metadata={}))
    with pytest.raises(InvalidTask, match="map paths to values"):
        env.check_task(Task(id="t", metadata={"schema": SCHEMA, "expected": ["name"]}))


def test_prompt_shows_the_schema() -> None:
    env = JSONSchema()
    content = env.prompt(_task())[-1]["content"]
    assert content.startswith("Describe Ada.") and '"minimum": 0' in content
    assert env.prompt(_task(show_schema=False))[-1]["content"] == "Describe Ada."
