"""``sql``: text-to-SQL on bundled SQLite databases. The model's query is run read-only, with a time
limit, and its result set is compared with the gold query's: what counts is the answer the query
returns, not how it is written.

Rows that name their ``sql_dialect`` (NeMo Gym's text_to_sql rows, whose ``sql_context`` becomes
``db_script``) are accepted for ``sqlite`` only, and only when the script builds the database and the gold
query runs on it; their prompt already shows the schema, so it is sent as it is.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask, ToolError, VerifierError
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.core.tools import tool
from palaestra.envs.sql import db

_FENCE = re.compile(r"```[ \t]*([A-Za-z]*)[ \t]*\n(.*?)```", re.DOTALL)
_INSTRUCTION = ("Write one SQLite SELECT query that answers the question. You may try queries with the "
                "run_query tool first. Give the final query in a ```sql code block.")


def extract_sql(text: str) -> str:
    """The query in the answer: the last ```sql block, else the last fenced block, else the whole text."""
    blocks = _FENCE.findall(text)
    tagged = [body for lang, body in blocks if lang.lower() in ("sql", "sqlite")]
    chosen = tagged[-1] if tagged else blocks[-1][1] if blocks else text
    return chosen.strip().rstrip(";").strip()


@dataclass
class SQLState:
    task: Task
    conn: sqlite3.Connection


class SQLEnv(Environment):
    """Text-to-SQL scored by result-set equality against the gold query."""

    name = "sql"
    version = "0.1"
    description = "Text-to-SQL on SQLite; reward 1 when the query's result set equals the gold query's."
    domain = "coding"
    mechanism = "single-turn"

    def __init__(self, time_limit_s: float = 2.0, max_rows: int = 10_000, tool_rows: int = 20) -> None:
        self.time_limit_s = time_limit_s
        self.max_rows = max_rows
        self.tool_rows = tool_rows

    def _script(self, task: Task) -> str:
        inline = task.metadata.get("db_script")
        if isinstance(inline, str) and inline.strip():
            return inline
        try:
            return db.bundled_script(str(task.metadata.get("db", "")))
        except ValueError as exc:
            raise InvalidTask(f"sql task '{task.id}': metadata.db: {exc}",
                              hint="name a bundled database or give the schema and rows in "
                                   "metadata.db_script") from None

    def check_task(self, task: Task) -> None:
        dialect = task.metadata.get("sql_dialect")
        if dialect is not None and str(dialect).lower() not in ("sqlite", "sqlite3"):
            raise InvalidTask(f"sql task '{task.id}': metadata.sql_dialect is {dialect!r}; queries are executed on "
                              "SQLite only, so a row of another dialect cannot be graded by its result set",
                              hint="use sqlite rows, or grade this one with a judge model")
        script = self._script(task)
        gold = task.metadata.get("gold_sql")
        if not isinstance(gold, str) or not gold.strip():
            raise InvalidTask(f"sql task '{task.id}' has no metadata.gold_sql",
                              hint="add the query whose result is the right answer")
        if dialect is not None:  # a row written for another tool: prove now that it can be graded here
            try:
                conn = db.open_readonly(script)
            except sqlite3.Error as exc:
                raise InvalidTask(f"sql task '{task.id}': metadata.db_script does not build on SQLite: {exc}",
                                  hint="fix the row's sql_context") from None
            try:
                db.run(conn, extract_sql(gold), time_limit_s=self._limit(task), max_rows=self.max_rows)
            except db.QueryError as exc:
                raise InvalidTask(f"sql task '{task.id}': metadata.gold_sql fails on SQLite: {exc}",
                                  hint="fix the row's gold query") from None
            finally:
                conn.close()

    def seed(self, task: Task) -> SQLState:
        self.check_task(task)
        try:
            return SQLState(task, db.open_readonly(self._script(task)))
        except sqlite3.Error as exc:
            raise InvalidTask(f"sql task '{task.id}': its database script fails: {exc}",
                              hint="fix data/<db>.sql or metadata.db_script") from None

    def close(self, state: SQLState) -> None:
        state.conn.close()

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        """Put the database's schema under the question (a row with ``sql_dialect`` shows it already)."""
        messages = super().prompt(task)
        if task.metadata.get("sql_dialect") is not None:
            return messages
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users or not isinstance(messages[users[-1]].get("content"), str):
            return messages
        conn = db.open_readonly(self._script(task))
        try:
            schema = db.schema_text(conn)
        finally:
            conn.close()
        last = messages[users[-1]]
        messages[users[-1]] = {**last, "content": f"{last['content'].rstrip()}\n\nDatabase schema (SQLite):\n"
                               f"```sql\n{schema}\n```\n\n{_INSTRUCTION}"}
        return messages

    @tool
    def run_query(self, state: SQLState, sql: str) -> str:
        """Run a read-only SQLite query on the task's database and see the first rows of its result.

        Args:
            sql: One SELECT statement.
        """
        try:
            result = db.run(state.conn, extract_sql(sql), time_limit_s=self._limit(state.task), max_rows=self.max_rows)
        except db.QueryError as exc:
            raise ToolError(f"query failed: {exc}", hint="fix the query; only one read-only SELECT may run") from None
        lines = [" | ".join(result.columns)]
        lines += [" | ".join("NULL" if v is None else str(v) for v in row) for row in result.rows[: self.tool_rows]]
        if len(result.rows) > self.tool_rows:
            lines.append(f"... {len(result.rows) - self.tool_rows} more row(s)")
        return "\n".join(lines) + f"\n({len(result.rows)} row(s))"

    def _limit(self, task: Task) -> float:
        return float(task.metadata.get("time_limit_s") or self.time_limit_s)

    def verify(self, state: SQLState, trajectory: Trajectory) -> Verdict:
        gold_sql = str(state.task.metadata["gold_sql"])
        limit = self._limit(state.task)
        try:
            gold = db.run(state.conn, gold_sql, time_limit_s=max(limit, 10.0), max_rows=self.max_rows)
        except db.QueryError as exc:
            raise VerifierError(f"sql task '{state.task.id}': the gold query fails: {exc}",
                                hint="fix metadata.gold_sql; the rollout is failed(verifier), not 0") from None
        sql = extract_sql(trajectory.final_text())
        if not sql:
            return Verdict(reward=0.0, passed=False, components={"executes": 0.0, "result_match": 0.0},
                           metadata={"reason": "no_query"})
        try:
            got = db.run(state.conn, sql, time_limit_s=limit, max_rows=self.max_rows)
        except db.QueryError as exc:
            return Verdict(reward=0.0, passed=False, components={"executes": 0.0, "result_match": 0.0},
                           metadata={"reason": "query_error", "error": str(exc)}, answer=sql)
        ordered = bool(state.task.metadata.get("ordered", db.has_top_level_order_by(gold_sql)))
        ok, detail = db.same_result(gold, got, ordered=ordered)
        metadata: dict[str, Any] = {"ordered": ordered, "detail": detail, "rows": len(got.rows)}
        return Verdict(reward=1.0 if ok else 0.0, passed=ok, components={"executes": 1.0, "result_match": float(ok)},
                       metadata=metadata, answer=sql)

    def reference(self, task: Task) -> Reference:
        return Reference(final_answer=f"```sql\n{task.metadata.get('gold_sql', '')}\n```")
