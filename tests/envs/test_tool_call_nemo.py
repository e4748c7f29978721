"""tool_call's ``nemo_compat`` readings without a NeMo Gym install: rows shaped as NeMo Gym's three
tool-call servers ship them, graded as each server grades (tests/parity/test_nemo_parity_families.py
checks the same against NeMo Gym itself where it is installed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task, ToolCallRecord, Trajectory, Verdict
from palaestra.envs.tool_call.env import ToolCallEnv
from palaestra.rollout.tasks import parse_row

TOOLS = [
    {
        "type": "function",
        "name": "lookup",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "note": {"type": "string"}},
            "required": ["city"],
        },
    },
    {"type": "function", "name": "other", "parameters": {"type": "object", "properties": {}}},
]


def _row(**fields: Any) -> Task:
    row = {"responses_create_params": {"input": [{"role": "user", "content": "Weather?"}], "tools": TOOLS}, **fields}
    return parse_row(row, "r", "tool_call")


def _grade(task: Task, calls: list[tuple[str, Any]], text: str | None = None, compat: bool = True) -> Verdict:
    env = ToolCallEnv(nemo_compat=compat)
    env.check_task(task)
    trajectory = Trajectory(tool_calls=[ToolCallRecord(name=n, arguments=a) for n, a in calls], final_answer=text)
    return env.verify(env.seed(task), trajectory)


def _action(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": json.dumps(args)}


def test_xlam_checks_only_the_expected_keys_with_python_equality() -> None:
    task = _row(expected_answers=[{"name": "lookup", "arguments": {"city": "Oslo", "days": 2}}])
    extra = [("lookup", {"city": "Oslo", "days": 2, "note": "x"})]
    assert _grade(task, extra).reward == 1.0
    assert not _grade(task, extra, compat=False).is_pass()  # Palaestra refuses arguments beyond the expected
    verdict = _grade(task, [("lookup", {"city": "Oslo", "days": 2.0})])
    assert verdict.reward == 1.0 and verdict.metadata["read_as"] == "xlam_fc"
    assert _grade(task, [("lookup", {"city": "oslo", "days": 2})]).reward == 0.0
    assert _grade(task, [("lookup", {"city": "Oslo", "days": 2})] * 2).reward == 0.0  # a surplus call costs


def test_single_step_surplus_calls_are_free_and_strings_compare_by_shared_words() -> None:
    task = _row(expected_action=_action("lookup", {"city": "Oslo", "note": "rain and wind"}))
    gold = ("lookup", {"city": "Oslo", "note": "rain and wind"})
    assert _grade(task, [gold, ("other", {})]).reward == 1.0
    assert not _grade(task, [gold, ("other", {})], compat=False).is_pass()
    # three of eight words shared: 3 / 8 >= 0.1, the threshold of its shipped default config
    assert _grade(task, [("lookup", {"city": "Oslo", "note": "RAIN and WIND tomorrow maybe"})]).reward == 1.0
    assert _grade(task, [("lookup", {"city": "oslo", "note": "rain and wind"})]).reward == 0.0  # one word: exact
    assert _grade(task, [("lookup", {"city": "Oslo"})]).reward == 0.0  # the keys must be the expected ones
    assert _grade(task, [("lookup", '{"city": ')]).reward == 0.0  # no JSON
    assert _grade(task, [], text="Sure.").reward == 0.0  # text where a call is expected


def test_single_step_types_configs_and_message_rows() -> None:
    task = _row(expected_action=_action("lookup", {"city": "Oslo", "days": 2}))
    assert _grade(task, [("lookup", {"city": "Oslo", "days": 2.0})]).reward == 0.0  # an int is no float
    # the search-pivot config's threshold (0.3): one shared word of six is too few, enough for 0.1
    words = _action("lookup", {"city": "Oslo", "note": "rain today"})
    near = [("lookup", {"city": "Oslo", "note": "rain is likely here"})]
    search = _row(
        expected_action=words, agent_ref={"name": "search_pivot_single_step_tool_use_with_argument_comparison_agent"}
    )
    assert _grade(_row(expected_action=words), near).reward == 1.0
    assert _grade(search, near).reward == 0.0
    # the parallel config counts calls and gives f1 credit
    batch = {
        "type": "function_call_batch",
        "calls": [_action("lookup", {"city": "Oslo"}), _action("lookup", {"city": "Rome"})],
    }
    parallel = _row(
        expected_action=batch,
        agent_ref={"name": "parallel_tool_calls_single_step_tool_use_with_argument_comparison_agent"},
    )
    assert _grade(parallel, [("lookup", {"city": "Oslo"})]).reward == pytest.approx(2 / 3)
    assert _grade(_row(expected_action=batch), [("lookup", {"city": "Oslo"})]).reward == 0.0
    message = _row(expected_action={"type": "message", "content": "Which city?"})
    assert _grade(message, [], text="Anything at all").reward == 1.0
    assert _grade(message, [("other", {})]).reward == 0.0


def test_multireward_gives_its_three_components_and_their_sum() -> None:
    task = _row(expected_call={"name": "lookup", "arguments": {"city": "Oslo"}})
    gold = _grade(task, [("lookup", {"city": "Oslo"})])
    assert gold.reward == 3.0 and gold.is_pass()
    assert gold.components == {"correctness": 1.0, "schema_valid": 1.0, "format": 1.0}
    twice = _grade(task, [("lookup", {"city": "Oslo"})] * 2)
    assert twice.components == {"correctness": 1.0, "schema_valid": 1.0, "format": 0.0} and not twice.is_pass()
    prose = _grade(task, [("lookup", {"city": "Oslo", "days": 9})], text="Looking it up.")
    assert (prose.reward, prose.components["format"]) == (2.0, 0.0)  # an extra argument is free
    missing = _grade(task, [("lookup", {"days": 1})])
    assert missing.components == {"correctness": 0.0, "schema_valid": 0.0, "format": 1.0}


def test_the_row_flag_decides_and_other_rows_keep_palaestras_reading() -> None:
    row = {"expected_answers": [{"name": "lookup", "arguments": {"city": "Oslo"}}]}
    extra = [("lookup", {"city": "Oslo", "days": 1})]
    assert _grade(_row(**row, nemo_compat=True), extra, compat=False).reward == 1.0
    assert _grade(_row(**row, nemo_compat=False), extra, compat=True).reward == 0.0
    with pytest.raises(InvalidTask, match="nemo_compat"):
        ToolCallEnv().check_task(_row(**row, nemo_compat="yes"))
    plain = Task(
        id="p",
        env="tool_call",
        input="?",
        tools=[{"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}}],
        metadata={"expected_calls": [{"name": "lookup", "arguments": {"city": "Oslo"}}]},
    )
    verdict = _grade(plain, extra)
    assert not verdict.is_pass() and "nemo_compat" not in verdict.metadata
