"""``expected_state``: a declarative description of what the agent must have changed.

    {"checks": [{"name": "standup cancelled", "table": "events",
                 "where": {"id": 6, "status": "cancelled"}},
                {"name": "Tomas told", "table": "emails", "expect": "exists",
                 "where": {"folder": "sent", "recipients": {"includes": "tomas.ruiz@northwind.test"}}},
                {"name": "id reported", "answer": {"icontains": "5"}}],
     "guards": [{"name": "Monday standup kept", "table": "events", "where": {"id": 1, "status": "scheduled"}}]}

A check holds when some row matches ``where`` (``expect: "absent"``: when none does; ``count``: exactly
that many). ``answer`` checks look at the agent's final message. Reward is the fraction of checks that
hold; a failed guard (collateral damage) zeroes it. Checks should describe *changes*, so an agent that
does nothing scores 0.

Matchers: a literal means equality; an object combines operators: ``eq``, ``ne``, ``ieq`` (case- and
space-insensitive), ``icontains``, ``icontains_all``, ``icontains_any``, ``includes`` / ``excludes``
(list columns), ``in``, ``null`` (true/false), ``gt``, ``gte``, ``lt``, ``lte``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from palaestra.envs.workplace.store import Office, rows

OPERATORS = frozenset(
    {"eq", "ne", "ieq", "icontains", "icontains_all", "icontains_any", "includes", "excludes", "in", "null",
     "gt", "gte", "lt", "lte"}
)


@dataclass(frozen=True)
class Outcome:
    name: str
    ok: bool
    guard: bool
    detail: str


def _fold(value: Any) -> str:
    return " ".join(str(value).split()).lower()


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _text(value: Any) -> str:
    return _fold(" ".join(map(str, value)) if isinstance(value, list) else ("" if value is None else value))


def _member(needle: Any, haystack: Any) -> bool:
    return _fold(needle) in {_fold(v) for v in _as_list(haystack) if v is not None}


def _compare(value: Any, op: str, arg: Any) -> bool:
    if op == "eq":
        return bool(value == arg)
    if op == "ne":
        return bool(value != arg)
    if op == "ieq":
        return value is not None and _fold(value) == _fold(arg)
    if op == "icontains":
        return _fold(arg) in _text(value)
    if op == "icontains_all":
        return all(_fold(a) in _text(value) for a in _as_list(arg))
    if op == "icontains_any":
        return any(_fold(a) in _text(value) for a in _as_list(arg))
    if op == "includes":
        return all(_member(a, value) for a in _as_list(arg))
    if op == "excludes":
        return not any(_member(a, value) for a in _as_list(arg))
    if op == "in":
        return value in _as_list(arg)
    if op == "null":
        return (value is None) == bool(arg)
    if value is None:
        return False
    try:
        return bool({"gt": value > arg, "gte": value >= arg, "lt": value < arg, "lte": value <= arg}[op])
    except TypeError:
        return False


def matches(value: Any, matcher: Any) -> bool:
    """Does one field value satisfy one matcher (a literal or an object of operators)?"""
    if isinstance(matcher, dict):
        return all(_compare(value, op, arg) for op, arg in matcher.items())
    return bool(value == matcher)


def _row_matches(row: dict[str, Any], where: dict[str, Any]) -> bool:
    return all(matches(row.get(field), matcher) for field, matcher in where.items())


def normalise(expected_state: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(checks, guards); a bare list is a list of checks."""
    if isinstance(expected_state, list):
        return expected_state, []
    if isinstance(expected_state, dict):
        return list(expected_state.get("checks") or []), list(expected_state.get("guards") or [])
    raise TypeError("expected_state must be an object with `checks` (and optional `guards`) or a list")


def validate(expected_state: Any, columns: dict[str, list[str]]) -> None:
    """Raise ValueError (TypeError for a wrong shape) naming the first malformed check."""
    checks, guards = normalise(expected_state)
    if not checks:
        raise ValueError("expected_state has no checks")
    for kind, items in (("checks", checks), ("guards", guards)):
        for i, check in enumerate(items):
            where = f"expected_state.{kind}[{i}]"
            if not isinstance(check, dict):
                raise TypeError(f"{where} must be an object")
            if "answer" in check:
                matchers = {"(answer)": check["answer"]}
            else:
                table = check.get("table")
                if table not in columns:
                    raise ValueError(f"{where}.table must be one of {sorted(columns)}, got {table!r}")
                matchers = check.get("where") or {}
                if not isinstance(matchers, dict):
                    raise ValueError(f"{where}.where must be an object of field matchers")
                unknown = sorted(set(matchers) - set(columns[table]))
                if unknown:
                    raise ValueError(f"{where}.where names unknown {table} fields {unknown}")
                if check.get("expect", "exists") not in ("exists", "absent"):
                    raise ValueError(f"{where}.expect must be 'exists' or 'absent'")
            for field, matcher in matchers.items():
                if isinstance(matcher, dict):
                    bad = sorted(set(matcher) - OPERATORS)
                    if bad:
                        raise ValueError(f"{where}: unknown operators {bad} on {field}; known: {sorted(OPERATORS)}")


def _label(check: dict[str, Any], index: int) -> str:
    if check.get("name"):
        return str(check["name"])
    if "answer" in check:
        return f"answer_{index}"
    return f"{check.get('expect', 'exists')} {check['table']} {json.dumps(check.get('where') or {}, sort_keys=True)}"


def _run_one(office: Office, check: dict[str, Any], answer: str) -> tuple[bool, str]:
    if "answer" in check:
        ok = matches(answer, check["answer"])
        return ok, "final answer matches" if ok else "final answer does not match"
    where = check.get("where") or {}
    # the matchers read only their own fields: list columns they do not name are left undecoded
    hits = sum(1 for row in rows(office, check["table"], decode=where) if _row_matches(row, where))
    if "count" in check:
        return hits == int(check["count"]), f"{hits} matching rows, expected {check['count']}"
    if check.get("expect", "exists") == "absent":
        return hits == 0, f"{hits} matching rows, expected none"
    return hits > 0, f"{hits} matching rows"


def evaluate(office: Office, expected_state: Any, answer: str) -> list[Outcome]:
    checks, guards = normalise(expected_state)
    out: list[Outcome] = []
    for guard, items in ((False, checks), (True, guards)):
        for i, check in enumerate(items):
            ok, detail = _run_one(office, check, answer)
            out.append(Outcome(name=_label(check, i), ok=ok, guard=guard, detail=detail))
    return out
