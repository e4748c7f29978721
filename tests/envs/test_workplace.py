from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from palaestra.core.errors import InvalidTask, ToolError
from palaestra.core.records import Task, ToolCallRecord, Trajectory
from palaestra.envs.workplace.env import Workplace
from palaestra.envs.workplace.store import Office

N = "@northwind.test"


def _tasks() -> dict[str, Task]:
    return {t.id: t for t in Workplace().examples()}


async def _play(env: Workplace, state: Office, task: Task, calls: list[tuple[str, dict[str, Any]]],
                answer: str) -> Trajectory:
    """Run tool calls the way an agent loop would, recording messages and tool call records."""
    messages = env.prompt(task)
    records = []
    for i, (name, args) in enumerate(calls):
        output = await env.call_tool(state, name, args)
        call_id = f"call_{i}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(output)})
        records.append(ToolCallRecord(name=name, arguments=args, call_id=call_id, output=output))
    messages.append({"role": "assistant", "content": answer})
    return Trajectory(messages=messages, tool_calls=records, final_answer=answer, steps=len(calls) + 1)


def test_has_enough_tools_with_documented_arguments() -> None:
    schemas = {s["function"]["name"]: s["function"] for s in Workplace().tool_schemas()}
    assert len(schemas) >= 8
    add = schemas["add_event"]["parameters"]
    assert add["required"] == ["title", "start", "end"]
    assert "YYYY-MM-DD" in add["properties"]["start"]["description"]
    assert schemas["update_ticket"]["parameters"]["properties"]["status"]["anyOf"][0]["enum"] == [
        "open", "in_progress", "resolved", "closed"]


async def test_reference_reaches_full_reward_on_every_bundled_task() -> None:
    env = Workplace()
    tasks = env.examples()
    assert len(tasks) >= 20
    for task in tasks:
        env.check_task(task)
        ref = env.reference(task)
        assert ref is not None and ref.tool_calls and ref.final_answer, task.id
        state = env.seed(task)
        try:
            trajectory = await _play(env, state, task, [(c.name, c.arguments) for c in ref.tool_calls],
                                     ref.final_answer)
            verdict = env.verify(state, trajectory)
        finally:
            env.close(state)
        assert verdict.reward == 1.0 and verdict.passed, (task.id, verdict.metadata)
        assert set(verdict.components.values()) == {1.0}


def test_doing_nothing_scores_zero_on_every_bundled_task() -> None:
    env = Workplace()
    for task in env.examples():
        state = env.seed(task)
        verdict = env.verify(state, Trajectory(final_answer=""))
        env.close(state)
        assert verdict.reward == 0.0 and not verdict.passed, task.id
        # Zero because no check holds, not because a guard broke: guards hold on the untouched state.
        assert "guards_broken" not in verdict.metadata, task.id
        assert all(v == 0.0 for k, v in verdict.components.items() if not k.startswith("guard: ")), task.id


@pytest.mark.parametrize(
    ("tool", "args", "bad"),
    [
        ("cancel_event", {"event_id": 99}, "99"),
        ("reschedule_event", {"event_id": 77, "start": "2025-03-12T10:00", "end": "2025-03-12T11:00"}, "77"),
        ("invite_to_event", {"event_id": 55, "email": "liam.byrne" + N}, "55"),
        ("read_email", {"email_id": 404}, "404"),
        ("send_email", {"to": ["tomas.ruiz" + N], "subject": "s", "body": "b", "in_reply_to": 321}, "321"),
        ("update_ticket", {"ticket_id": 42, "status": "closed"}, "42"),
        ("invite_to_event", {"event_id": 2, "email": "nobody" + N}, "nobody" + N),
        ("create_ticket", {"title": "x", "assignee": "ghost" + N}, "ghost" + N),
        ("add_event", {"title": "x", "start": "next tuesday", "end": "2025-03-12T11:00"}, "next tuesday"),
        ("add_event", {"title": "x", "start": "2025-03-12T11:00", "end": "2025-03-12T10:00"}, "not after"),
        ("cancel_event", {"event_id": 6}, None),  # valid: see the second call below
    ],
)
async def test_bad_ids_and_values_answer_with_a_tool_error_naming_them(
    tool: str, args: dict[str, Any], bad: str | None
) -> None:
    env = Workplace()
    task = _tasks()["workplace-cancel-thursday-standup"]
    state = env.seed(task)
    try:
        if bad is None:
            await env.call_tool(state, tool, args)
            with pytest.raises(ToolError, match="already cancelled"):
                await env.call_tool(state, tool, args)
            return
        with pytest.raises(ToolError) as info:
            await env.call_tool(state, tool, args)
        assert bad in info.value.message and info.value.hint
        # A failed call changes nothing.
        assert env.verify(state, Trajectory(final_answer="")).reward == 0.0
    finally:
        env.close(state)


async def test_sessions_are_isolated_and_ids_are_deterministic() -> None:
    env = Workplace()
    task = _tasks()["workplace-cancel-thursday-standup"]
    first, second = env.seed(task), env.seed(task)
    try:
        await env.call_tool(first, "cancel_event", {"event_id": 6})
        created = await env.call_tool(first, "create_ticket", {"title": "A", "priority": "low"})
        assert env.verify(first, Trajectory(final_answer="")).reward == 1.0
        assert env.verify(second, Trajectory(final_answer="")).reward == 0.0
        thursday = await env.call_tool(second, "list_events", {"date": "2025-03-13"})
        assert 6 in [e["id"] for e in thursday]
        assert await env.call_tool(second, "list_tickets", {"status": "all"}) == [
            t for t in await env.call_tool(first, "list_tickets", {"status": "all"}) if t["id"] != created["id"]]
        again = await env.call_tool(second, "create_ticket", {"title": "B"})
        assert again["id"] == created["id"] == 7  # six fixture tickets, then autoincrement
    finally:
        env.close(first)
        env.close(second)


async def test_breaking_a_guard_zeroes_the_reward() -> None:
    env = Workplace()
    task = _tasks()["workplace-cancel-thursday-standup"]
    state = env.seed(task)
    await env.call_tool(state, "cancel_event", {"event_id": 6})
    await env.call_tool(state, "cancel_event", {"event_id": 1})  # collateral damage: Monday's standup
    verdict = env.verify(state, Trajectory(final_answer="done"))
    env.close(state)
    assert verdict.reward == 0.0 and not verdict.passed
    assert verdict.metadata["guards_broken"] == ["Monday standup kept"]
    assert verdict.components["Thursday standup cancelled"] == 1.0


async def test_partial_work_earns_partial_reward() -> None:
    env = Workplace()
    task = _tasks()["workplace-friday-off"]
    state = env.seed(task)
    await env.call_tool(state, "cancel_event", {"event_id": 8})
    await env.call_tool(state, "send_email", {"to": ["tomas.ruiz" + N], "subject": "Off", "body": "Friday off"})
    verdict = env.verify(state, Trajectory(final_answer="done"))
    env.close(state)
    assert verdict.reward == pytest.approx(2 / 7) and not verdict.passed
    assert verdict.components["laptop planning cancelled"] == 0.0
    assert "laptop planning cancelled" in verdict.metadata["failed"]


async def test_answer_checks_read_the_final_message() -> None:
    env = Workplace()
    task = _tasks()["workplace-build-ticket-to-liam"]
    state = env.seed(task)
    await env.call_tool(state, "update_ticket", {"ticket_id": 5, "assignee": "liam.byrne" + N})
    assert env.verify(state, Trajectory(final_answer="Done.")).reward == 0.5
    assert env.verify(state, Trajectory(final_answer="Ticket 5, urgent, now Liam's.")).reward == 1.0
    env.close(state)


def test_close_releases_the_connection() -> None:
    env = Workplace()
    state = env.seed(_tasks()["workplace-reopen-chair-ticket"])
    env.close(state)
    with pytest.raises(sqlite3.ProgrammingError):
        state.conn.execute("SELECT 1")


def test_prompt_names_the_user_and_the_date_but_not_the_answers() -> None:
    env = Workplace()
    task = _tasks()["workplace-bluefin-close-resolved"]
    messages = env.prompt(task)
    assert messages[0]["role"] == "system" and "Kai Moreno" in messages[0]["content"]
    assert "2025-06-04" in messages[0]["content"]
    assert "expected_state" not in json.dumps(messages) and "closed" not in messages[0]["content"]


@pytest.mark.parametrize(
    ("metadata", "needle"),
    [
        ({}, "expected_state"),
        ({"expected_state": {"checks": []}}, "no checks"),
        ({"expected_state": {"checks": [{"table": "meetings", "where": {}}]}}, "table"),
        ({"expected_state": {"checks": [{"table": "events", "where": {"colour": "red"}}]}}, "colour"),
        ({"expected_state": {"checks": [{"table": "events", "where": {"id": {"like": "x"}}}]}}, "like"),
        ({"expected_state": [{"table": "events", "where": {"id": 1}}],
          "initial_state": {"events": [{"id": 1, "mood": "x"}]}}, "mood"),
    ],
)
def test_invalid_tasks_name_the_bad_field(metadata: dict[str, Any], needle: str) -> None:
    task = Task(id="bad", env="workplace", input="Do it.", metadata=metadata)
    with pytest.raises(InvalidTask, match=needle):
        Workplace().check_task(task)
    with pytest.raises(InvalidTask):
        Workplace().seed(task)


async def test_custom_initial_state_replaces_or_extends_the_default_company() -> None:
    env = Workplace()
    tasks = _tasks()
    bluefin = env.seed(tasks["workplace-bluefin-close-resolved"])
    extended = env.seed(tasks["workplace-extra-hire-welcome"])
    try:
        assert [e["name"] for e in await env.call_tool(bluefin, "lookup_employee", {"name": "Dana"})] == []
        assert len(await env.call_tool(bluefin, "list_employees", {})) == 4
        jamie = await env.call_tool(extended, "lookup_employee", {"name": "jamie"})
        assert jamie[0]["id"] == 14 and jamie[0]["department"] == "Design"
        assert await env.call_tool(extended, "lookup_employee", {"name": "Dana"})
    finally:
        env.close(bluefin)
        env.close(extended)


def test_seeded_database_is_a_faithful_independent_copy() -> None:
    """Sessions are seeded from a copy of a database built once per fixture (store.build_copy): the copy
    holds exactly what a fresh build holds, and what one session changes never reaches the next."""
    from palaestra.envs.registry import load_env as _load
    from palaestra.envs.workplace import store
    from palaestra.envs.workplace.env import _check_key

    task = _load("workplace").examples()[0]
    fixture = store.resolve_fixture(task.metadata.get("initial_state"))
    key = _check_key(task.metadata)
    fresh = list(store.build(fixture).conn.iterdump())
    first = store.build_copy(key, fixture)
    assert list(first.conn.iterdump()) == fresh
    first.conn.execute("DELETE FROM tickets")
    first.conn.commit()
    second = store.build_copy(key, fixture)
    assert list(second.conn.iterdump()) == fresh and second.user == first.user and second.now == first.now
