"""``workplace``: a stateful office (calendar, email, helpdesk tickets, staff directory) in a
per-session SQLite database. The agent acts for one employee; the verifier compares the final
database with the task's ``expected_state`` (see ``spec.py``), so the reward measures what the agent
*did*, not what it said.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Reference, Task, ToolCall, Trajectory, Verdict
from palaestra.envs.workplace import spec, store
from palaestra.envs.workplace.store import Office
from palaestra.envs.workplace.tools import WorkplaceTools

# Fixtures whose (initial_state, expected_state) already passed check_task. Checking builds a whole SQLite
# database, and a task is checked before the run, again when its session opens and again in seed: that
# was most of a multi-turn rollout's CPU. Only successes are kept (a bad row is re-checked, so its error
# names it), keyed by the canonical JSON of both fields; bounded, cleared when full.
_CHECKED: dict[bytes, None] = {}
_CHECKED_MAX = 4096


def _check_key(metadata: dict[str, Any]) -> bytes | None:
    try:
        return orjson.dumps([metadata.get("initial_state"), metadata["expected_state"]],
                            option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return None  # not plain JSON: checked every time


class Workplace(WorkplaceTools, Environment):
    """Office assistant tasks over a calendar, a mailbox and a ticket queue, scored on the final state."""

    name = "workplace"
    version = "0.1"
    description = "A small company's calendar, email and tickets in SQLite; reward = expected changes made."
    domain = "workplace"
    mechanism = "stateful"

    def check_task(self, task: Task) -> None:
        if "expected_state" not in task.metadata:
            raise InvalidTask(
                f"workplace task '{task.id}' has no metadata.expected_state",
                hint='add {"checks": [{"table": ..., "where": {...}}]} describing the changes to make',
            )
        key = _check_key(task.metadata)
        if key is None or key not in _CHECKED:
            self._check_state(task)
            if key is not None:
                if len(_CHECKED) >= _CHECKED_MAX:
                    _CHECKED.clear()
                _CHECKED[key] = None
        ref = task.metadata.get("reference")
        if ref is not None and not isinstance(ref, (dict, list)):
            raise InvalidTask(
                f"workplace task '{task.id}': metadata.reference must be an object or a list",
                hint='use {"tool_calls": [{"name": ..., "arguments": {...}}], "final_answer": "..."}',
            )

    def _check_state(self, task: Task) -> None:
        """Build the initial state and check ``expected_state`` against its tables."""
        try:
            office = store.build(store.resolve_fixture(task.metadata.get("initial_state")))
        except ValueError as exc:
            raise InvalidTask(f"workplace task '{task.id}': {exc}", hint="fix metadata.initial_state") from None
        try:
            spec.validate(task.metadata["expected_state"], {t: office.columns(t) for t in store.TABLES})
        except (ValueError, TypeError) as exc:
            raise InvalidTask(f"workplace task '{task.id}': {exc}", hint="fix metadata.expected_state") from None
        finally:
            office.conn.close()

    def seed(self, task: Task) -> Office:
        self.check_task(task)
        office = store.build_copy(_check_key(task.metadata), store.resolve_fixture(task.metadata.get("initial_state")))
        office.expected_state = task.metadata["expected_state"]
        return office

    def close(self, state: Office) -> None:
        state.conn.close()

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        """Tell the model who it works for and what day it is (both come from the seeded state)."""
        fixture = store.resolve_fixture(task.metadata.get("initial_state"))
        user = str(fixture.get("user") or "")
        person: dict[str, Any] = next(
            (e for e in fixture.get("employees") or [] if e.get("email") == user), {}
        )
        now = datetime.fromisoformat(str(fixture.get("now") or "2025-01-01T09:00"))
        who = f"{person.get('name', user)} ({user})" + (f", {person['title']}" if person.get("title") else "")
        system = (
            f"You are the assistant of {who} at {fixture.get('company') or 'the company'}. "
            f"It is {now:%A} {now:%Y-%m-%d}, {now:%H:%M}. Use the tools to read and change the calendar, "
            "email and helpdesk tickets. Times are written YYYY-MM-DDTHH:MM. When you are done, reply with "
            "a short summary of what you did."
        )
        messages = task.messages()
        if not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": system})
        return messages

    def verify(self, state: Office, trajectory: Trajectory) -> Verdict:
        outcomes = spec.evaluate(state, state.expected_state, trajectory.final_text())
        checks = [o for o in outcomes if not o.guard]
        guards = [o for o in outcomes if o.guard]
        broken = [o.name for o in guards if not o.ok]
        reward = 0.0 if broken or not checks else sum(o.ok for o in checks) / len(checks)
        components = {o.name: float(o.ok) for o in checks}
        components.update({f"guard: {o.name}": float(o.ok) for o in guards})
        metadata: dict[str, Any] = {"failed": {o.name: o.detail for o in outcomes if not o.ok}}
        if broken:
            metadata["guards_broken"] = broken
        return Verdict(
            reward=reward,
            passed=bool(checks) and all(o.ok for o in outcomes),
            components=components,
            metadata=metadata,
        )

    def reference(self, task: Task) -> Reference | None:
        ref = task.metadata.get("reference")
        if ref is None:
            return None
        if isinstance(ref, list):
            calls, answer = ref, task.metadata.get("reference_answer")
        else:
            calls, answer = ref.get("tool_calls") or [], ref.get("final_answer")
        return Reference(
            tool_calls=[ToolCall(name=c["name"], arguments=dict(c.get("arguments") or {})) for c in calls],
            final_answer=answer,
        )
