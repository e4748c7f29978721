"""The workplace's per-session database: an in-memory SQLite file seeded from a fixture.

Every session gets its own connection, so sessions never see each other's changes, and ids come from
fixture order then AUTOINCREMENT, so the ids a reference solution uses are the same on every run.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from palaestra.core.errors import ToolError

SCHEMA = """
CREATE TABLE employees (
    id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, email TEXT NOT NULL UNIQUE,
    department TEXT NOT NULL DEFAULT '', title TEXT NOT NULL DEFAULT '', manager TEXT);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, start TEXT NOT NULL, "end" TEXT NOT NULL,
    attendees TEXT NOT NULL DEFAULT '[]', organizer TEXT, location TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL DEFAULT 'scheduled');
CREATE TABLE emails (
    id INTEGER PRIMARY KEY AUTOINCREMENT, sender TEXT NOT NULL, recipients TEXT NOT NULL DEFAULT '[]',
    subject TEXT NOT NULL, body TEXT NOT NULL DEFAULT '', sent_at TEXT NOT NULL,
    folder TEXT NOT NULL DEFAULT 'inbox', in_reply_to INTEGER);
CREATE TABLE tickets (
    id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',
    priority TEXT NOT NULL DEFAULT 'medium', status TEXT NOT NULL DEFAULT 'open', assignee TEXT,
    reporter TEXT, created_at TEXT NOT NULL DEFAULT '', updated_at TEXT);
"""

TABLES = ("employees", "events", "emails", "tickets")
LIST_COLUMNS = {"events": ("attendees",), "emails": ("recipients",)}
FIXTURE_PATH = Path(__file__).resolve().parent / "data" / "fixture.json"

_default_fixture: dict[str, Any] | None = None


def default_fixture() -> dict[str, Any]:
    """The bundled company (Northwind Labs), read once."""
    global _default_fixture
    if _default_fixture is None:
        _default_fixture = json.loads(FIXTURE_PATH.read_text(encoding="utf-8"))
    return _default_fixture


def resolve_fixture(initial_state: dict[str, Any] | None) -> dict[str, Any]:
    """The task's ``initial_state``, else the default fixture. With ``"include_default": true`` the
    task's rows are added on top of the default company instead of replacing it."""
    if not initial_state:
        return default_fixture()
    if not initial_state.get("include_default"):
        return initial_state
    merged = dict(default_fixture())
    for key, value in initial_state.items():
        if key in TABLES:
            merged[key] = list(merged.get(key, [])) + list(value)
        elif key != "include_default":
            merged[key] = value
    return merged


@dataclass
class Office:
    """One session: its database and who/when the agent is acting as."""

    conn: sqlite3.Connection
    user: str
    now: str
    company: str
    expected_state: Any = None  # the task's spec, kept for verify (state is all verify is given)

    def columns(self, table: str) -> list[str]:
        return [row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")]


def build(fixture: dict[str, Any]) -> Office:
    """A fresh in-memory database holding ``fixture``; ValueError names the bad table, row and field."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.executescript(SCHEMA)
    try:
        for table in TABLES:
            rows = fixture.get(table) or []
            if not isinstance(rows, list):
                raise TypeError(f"initial_state.{table} must be a list of rows")
            allowed = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            for i, row in enumerate(rows):
                if not isinstance(row, dict):
                    raise TypeError(f"initial_state.{table}[{i}] must be an object")
                unknown = sorted(set(row) - set(allowed))
                if unknown:
                    raise ValueError(f"initial_state.{table}[{i}] has unknown fields {unknown}; known: {allowed}")
                insert(conn, table, row)
        conn.commit()
    except (sqlite3.Error, ValueError, TypeError) as exc:
        conn.close()
        raise ValueError(str(exc)) from None
    return _office(conn, fixture)


def _office(conn: sqlite3.Connection, fixture: dict[str, Any]) -> Office:
    return Office(conn=conn, user=str(fixture.get("user") or ""), now=str(fixture.get("now") or "2025-01-01T09:00"),
                  company=str(fixture.get("company") or "the company"))


# Built databases by fixture key, copied for each new session with SQLite's backup API (a page copy, tens
# of microseconds) instead of re-inserting every row: building was most of a multi-turn rollout's CPU.
# The copy holds exactly the rows, ids and schema a fresh build would. Bounded; cleared when full.
_TEMPLATES: dict[bytes, sqlite3.Connection] = {}
_TEMPLATES_MAX = 256


def build_copy(key: bytes | None, fixture: dict[str, Any]) -> Office:
    """``build(fixture)``, served from a copy of the database built earlier for the same ``key`` (the
    canonical JSON of what the fixture came from); ``key`` None: always built."""
    template = _TEMPLATES.get(key) if key is not None else None
    if template is None:
        office = build(fixture)
        if key is not None:
            if len(_TEMPLATES) >= _TEMPLATES_MAX:
                for old in _TEMPLATES.values():
                    old.close()
                _TEMPLATES.clear()
            copy = sqlite3.connect(":memory:", check_same_thread=False)
            office.conn.backup(copy)
            _TEMPLATES[key] = copy
        return office
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.row_factory = sqlite3.Row
    template.backup(conn)
    return _office(conn, fixture)


def insert(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> int:
    values = {k: (json.dumps(v) if k in LIST_COLUMNS.get(table, ()) else v) for k, v in row.items()}
    cols = ", ".join(f'"{k}"' for k in values)
    marks = ", ".join("?" for _ in values)
    cur = conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(values.values()))
    return int(cur.lastrowid or 0)


def update(conn: sqlite3.Connection, table: str, row_id: int, changes: dict[str, Any]) -> None:
    values = {k: (json.dumps(v) if k in LIST_COLUMNS.get(table, ()) else v) for k, v in changes.items()}
    sets = ", ".join(f'"{k}" = ?' for k in values)
    conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?", [*values.values(), row_id])
    conn.commit()


def _list_value(text: str | None) -> Any:
    """A list column's JSON (written by ``json.dumps``). orjson reads it in a fraction of ``json``'s time
    (verification and every listing tool decode tens of rows per rollout); the few texts it refuses and
    ``json`` takes (NaN, Infinity) are read by ``json``, so a value reads back as it always did."""
    if not text:
        return []
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def as_dict(table: str, row: sqlite3.Row) -> dict[str, Any]:
    """A row as JSON-able data, list columns decoded."""
    out = dict(row)
    for col in LIST_COLUMNS.get(table, ()):
        out[col] = _list_value(out[col])
    return out


def rows(office: Office, table: str, where: str = "1", params: tuple[Any, ...] = (), *,
         decode: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The rows of ``table`` matching the SQL ``where``, in id order. ``decode``: the list columns to
    decode (None: all); a reader that looks at some fields only (a check's matchers) skips the rest."""
    cur = office.conn.execute(f"SELECT * FROM {table} WHERE {where} ORDER BY id", params)
    if decode is None:
        return [as_dict(table, r) for r in cur.fetchall()]
    lists = [c for c in LIST_COLUMNS.get(table, ()) if c in decode]
    out = [dict(r) for r in cur.fetchall()]
    for row in out if lists else ():
        for col in lists:
            row[col] = _list_value(row[col])
    return out


def get(office: Office, table: str, row_id: int, what: str, hint: str) -> dict[str, Any]:
    """The row with ``row_id``, or a ToolError naming the id that does not exist."""
    found = rows(office, table, "id = ?", (row_id,))
    if not found:
        raise ToolError(f"no {what} with id {row_id}", hint=hint)
    return found[0]


def when(value: str, field: str) -> str:
    """Normalise a date-time argument to ``YYYY-MM-DDTHH:MM``."""
    try:
        return datetime.fromisoformat(value.strip().replace(" ", "T")).strftime("%Y-%m-%dT%H:%M")
    except ValueError:
        raise ToolError(
            f"{field} {value!r} is not a date-time", hint=f"write {field} like 2025-03-12T14:30"
        ) from None


def day(value: str) -> str:
    try:
        return datetime.fromisoformat(value.strip()[:10]).strftime("%Y-%m-%d")
    except ValueError:
        raise ToolError(f"date {value!r} is not a date", hint="write the date like 2025-03-12") from None
