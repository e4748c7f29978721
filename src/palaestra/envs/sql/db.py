"""SQLite sessions that a model's SQL cannot harm or hang, and result-set comparison.

Each session loads its database script into a fresh in-memory connection, so nothing is shared. An
authorizer allows reading only (no writes, no ``PRAGMA``, no ``ATTACH``), ``PRAGMA query_only`` is on
as a second guard, and a progress handler aborts any statement that runs past its time limit.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"

_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}


class QueryError(Exception):
    """The query failed (syntax, unknown column, not allowed, too slow, too large)."""


@lru_cache(maxsize=32)
def bundled_script(name: str) -> str:
    """The SQL script of a bundled database (``data/<name>.sql``); ValueError lists the known ones."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"bad database name {name!r}")
    path = DATA / f"{name}.sql"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in DATA.glob("*.sql")))
        raise ValueError(f"no bundled database {name!r} (known: {known})")
    return path.read_text(encoding="utf-8")


def _authorize(action: int, *args: Any) -> int:
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def open_readonly(script: str) -> sqlite3.Connection:
    """A new in-memory database built from ``script``, then locked to reads."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.executescript(script)
    conn.execute("PRAGMA query_only = ON")
    conn.set_authorizer(_authorize)
    return conn


def schema_text(conn: sqlite3.Connection) -> str:
    """The ``CREATE`` statements of the tables, as the model should see them."""
    rows = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
                        "ORDER BY rowid").fetchall()
    return ";\n".join(r[0] for r in rows) + ";"


@dataclass
class Result:
    columns: list[str]
    rows: list[tuple[Any, ...]]


def run(conn: sqlite3.Connection, sql: str, *, time_limit_s: float, max_rows: int) -> Result:
    """Run one read-only statement within the time limit; QueryError says why it failed."""
    deadline = time.monotonic() + time_limit_s
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
    try:
        cur = conn.execute(sql)
        rows = cur.fetchmany(max_rows + 1)
        columns = [d[0] for d in cur.description or []]
    except sqlite3.Warning as exc:  # e.g. "You can only execute one statement at a time."
        raise QueryError(str(exc)) from None
    except sqlite3.DatabaseError as exc:
        message = str(exc)
        if "interrupted" in message:
            message = f"query stopped after the time limit of {time_limit_s:g} s"
        elif "not authorized" in message:
            message = "not authorized: only read-only SELECT queries may run"
        raise QueryError(message) from None
    finally:
        conn.set_progress_handler(None, 0)
    if len(rows) > max_rows:
        raise QueryError(f"the query returns more than {max_rows} rows")
    if not columns:
        raise QueryError("the statement returns no result set; write a SELECT query")
    return Result(columns, [tuple(r) for r in rows])


def _norm(value: Any) -> Any:
    """Numbers compare by value to 6 decimals (3 == 3.0), everything else as it is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return round(float(value), 6) + 0.0
    return value


def _key(row: tuple[Any, ...]) -> tuple[tuple[int, str], ...]:
    return tuple((0 if v is None else 1, repr(v)) for v in row)


def has_top_level_order_by(sql: str) -> bool:
    """Whether the outermost query orders its rows (an ORDER BY inside a subquery does not count)."""
    text = re.sub(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", "''", sql)
    text = re.sub(r"--[^\n]*|/\*.*?\*/", " ", text, flags=re.DOTALL)
    previous = None
    while previous != text:
        previous, text = text, re.sub(r"\([^()]*\)", "()", text)
    return re.search(r"\border\s+by\b", text, re.IGNORECASE) is not None


def same_result(gold: Result, got: Result, *, ordered: bool) -> tuple[bool, str]:
    """Result-set equality (columns by position, names ignored); a multiset unless ``ordered``."""
    if len(gold.columns) != len(got.columns):
        return False, f"{len(got.columns)} column(s), expected {len(gold.columns)}"
    want = [tuple(_norm(v) for v in r) for r in gold.rows]
    have = [tuple(_norm(v) for v in r) for r in got.rows]
    if ordered:
        if want == have:
            return True, "same rows in the same order"
        if Counter(map(_key, want)) == Counter(map(_key, have)):
            return False, "same rows in a different order (the question asks for an order)"
    elif Counter(map(_key, want)) == Counter(map(_key, have)):
        return True, "same rows"
    return False, f"{len(have)} row(s) differ from the expected {len(want)}"
