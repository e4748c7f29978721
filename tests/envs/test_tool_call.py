from __future__ import annotations

from typing import Any

import pytest

from palaestra.core.errors import BadArguments, InvalidTask, UnknownTool
from palaestra.core.records import Task, ToolCallRecord, Trajectory
from palaestra.envs.tool_call.env import ToolCallEnv
from palaestra.envs.tool_call.match import max_matching, same_value
from palaestra.server.sessions import EnvironmentHost

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1},
                                     "unit": {"type": "string", "enum": ["c", "f"]}},
    "required": ["city"], "additionalProperties": False}}}
CONVERT = {"type": "function", "function": {"name": "convert", "parameters": {
    "type": "object", "properties": {"amount": {"type": "number"}, "to": {"type": "string"}},
    "required": ["amount", "to"]}}}


def _task(calls: list[tuple[str, dict[str, Any]]], **meta: Any) -> Task:
    return Task(id="t", env="tool_call", input="?", tools=[WEATHER, CONVERT],
                metadata={"expected_calls": [{"name": n, "arguments": a} for n, a in calls], **meta})


def _score(task: Task, calls: list[tuple[str, Any]]):  # type: ignore[no-untyped-def]
    env = ToolCallEnv()
    traj = Trajectory(tool_calls=[ToolCallRecord(name=n, arguments=a) for n, a in calls])
    return env.verify(env.seed(task), traj)


def test_bundled_tasks_oracle_scores_one_through_the_hook_and_null_zero() -> None:
    env = ToolCallEnv()
    tasks = env.examples()
    assert len(tasks) >= 20
    assert sum(len(t.metadata["expected_calls"]) > 1 for t in tasks) >= 5
    for task in tasks:
        state = env.seed(task)
        ref = env.reference(task)
        records = [ToolCallRecord(name=c.name, arguments=c.arguments,
                                  output=env.dynamic_tool(state, c.name, c.arguments)) for c in ref.tool_calls]
        assert len(state.calls) == len(ref.tool_calls)
        verdict = env.verify(state, Trajectory(tool_calls=records, final_answer=ref.final_answer))
        assert verdict.reward == 1.0 and verdict.passed, (task.id, verdict.metadata)
        assert env.verify(env.seed(task), Trajectory(final_answer="")).reward == 0.0


def test_parallel_calls_match_in_any_order_unless_ordered() -> None:
    task = _task([("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})])
    swapped = [("get_weather", {"city": "Rome"}), ("get_weather", {"city": "Oslo"})]
    assert _score(task, swapped).passed
    ordered = _task([("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})], ordered=True)
    assert _score(ordered, swapped).reward == 0.0


def test_missing_extra_and_wrong_calls_cost_reward() -> None:
    task = _task([("get_weather", {"city": "Oslo"}), ("convert", {"amount": 5, "to": "EUR"})])
    missing = _score(task, [("get_weather", {"city": "Oslo"})])
    assert missing.reward == 0.5 and not missing.passed
    assert missing.metadata["unmatched"] == {"1.convert": "not called"}
    extra = _score(task, [("get_weather", {"city": "Oslo"}), ("convert", {"amount": 5, "to": "EUR"}),
                          ("get_weather", {"city": "Oslo"})])
    assert extra.reward == pytest.approx(2 / 3) and extra.components["no_extra_calls"] == 0.0
    wrong = _score(task, [("get_weather", {"city": "Oslo"}), ("convert", {"amount": "5", "to": "EUR"})])
    assert wrong.reward == 0.5 and wrong.components["names"] == 1.0
    assert wrong.metadata["unmatched"]["1.convert"] == "amount='5', expected 5"


def test_arguments_compare_typed_with_optional_normalisation_defaults_and_one_of() -> None:
    assert same_value(5, 5.0, False) and not same_value(1, True, False) and not same_value("5", 5, False)
    task = _task([("convert", {"amount": 5, "to": "EUR"})])
    assert _score(task, [("convert", {"amount": 5.0, "to": "EUR"})]).passed
    assert not _score(task, [("convert", {"amount": 5, "to": " eur"})]).passed
    assert _score(_task([("convert", {"amount": 5, "to": "EUR"})], normalize_strings=True),
                  [("convert", {"amount": 5, "to": " eur"})]).passed
    weather = _task([("get_weather", {"city": {"$one_of": ["NYC", "New York"]}})])
    assert _score(weather, [("get_weather", {"city": "New York"})]).passed
    assert _score(weather, [("get_weather", {"city": "NYC", "days": 1})]).passed  # equals the schema default
    extra = _score(weather, [("get_weather", {"city": "NYC", "days": 3})])
    assert not extra.passed and "unexpected argument days=3" in extra.metadata["unmatched"]["0.get_weather"]
    allowed = _task([("get_weather", {"city": "NYC"})], allow_extra_arguments=True)
    assert _score(allowed, [("get_weather", {"city": "NYC", "days": 3})]).passed


def test_calls_are_read_from_messages_when_no_tool_records_exist() -> None:
    env = ToolCallEnv()
    task = _task([("convert", {"amount": 5, "to": "EUR"})])
    messages = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "convert", "arguments": '{"amount": 5, "to": "EUR"}'}}]}]
    assert env.verify(env.seed(task), Trajectory(messages=messages)).passed
    broken = [{"role": "assistant", "tool_calls": [{"function": {"name": "convert", "arguments": "{not json"}}]}]
    verdict = env.verify(env.seed(task), Trajectory(messages=broken))
    assert verdict.reward == 0.0 and verdict.metadata["unmatched"]["0.convert"] == "arguments are not a JSON object"


def test_dynamic_tool_validates_records_and_answers() -> None:
    env = ToolCallEnv()
    state = env.seed(_task([("convert", {"amount": 5, "to": "EUR"})], tool_results={"convert": {"result": 4.6}}))
    assert env.dynamic_tool(state, "get_weather", '{"city": "Oslo"}') == "ok"
    assert env.dynamic_tool(state, "convert", {"amount": 5, "to": "EUR"}) == {"result": 4.6}
    assert [c.name for c in state.calls] == ["get_weather", "convert"]
    with pytest.raises(UnknownTool, match="available tools: convert, get_weather"):
        env.dynamic_tool(state, "nope", {})
    with pytest.raises(BadArguments, match="not valid JSON"):
        env.dynamic_tool(state, "convert", "{oops")
    with pytest.raises(BadArguments, match="'amount' is a required property"):
        env.dynamic_tool(state, "convert", {"to": "EUR"})
    with pytest.raises(BadArguments, match="Additional properties"):
        env.dynamic_tool(state, "get_weather", {"city": "Oslo", "zzz": 1})
    assert len(state.calls) == 2


def test_the_session_sees_the_tasks_tools_and_info_lists_none() -> None:
    env = ToolCallEnv()
    task = _task([("convert", {"amount": 5, "to": "EUR"})])
    assert [t["function"]["name"] for t in env.tool_schemas(task)] == ["get_weather", "convert"]
    assert env.info()["tools"] == []


@pytest.mark.parametrize(("meta", "fragment"), [
    ({"expected_calls": [{"name": "missing_tool", "arguments": {}}]}, "names no tool"),
    ({"expected_calls": [{"name": "convert", "arguments": {"amount": "x", "to": "EUR"}}]}, "does not fit the schema"),
    ({}, "no metadata.expected_calls"),
])
def test_bad_tasks_are_rejected(meta: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidTask, match=fragment):
        ToolCallEnv().check_task(Task(id="t", tools=[WEATHER, CONVERT], metadata=meta))


def test_max_matching_finds_the_best_pairing() -> None:
    # expected 0 fits actual 0 or 1; expected 1 fits only actual 0: both must be matched.
    owner = max_matching([[True, True], [True, False]])
    assert sorted(owner) == [0, 1] and owner[0] == 1



async def test_session_host_routes_task_tools_to_the_hook() -> None:
    host = EnvironmentHost(ToolCallEnv())
    opened = await host.open(_task([("convert", {"amount": 5, "to": "EUR"})]))
    try:
        result = await host.call_tool(opened["session_id"], "convert", {"amount": 5, "to": "EUR"})
        assert result.error is None and result.output == "ok"
    finally:
        await host.close_all()
