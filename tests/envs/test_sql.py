from __future__ import annotations

import sqlite3
import time

import pytest

from palaestra.core.errors import InvalidTask, ToolError, VerifierError
from palaestra.core.records import Task, Trajectory
from palaestra.envs.sql import db
from palaestra.envs.sql.env import SQLEnv, extract_sql

SCRIPT = """
CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score REAL);
INSERT INTO t VALUES (1, 'a', 3), (2, 'b', 1.5), (3, 'c', 2);
"""


def _task(gold: str, **meta: object) -> Task:
    return Task(id="t", env="sql", input="?", metadata={"db_script": SCRIPT, "gold_sql": gold, **meta})


def _verify(gold: str, answer: str, env: SQLEnv | None = None, **meta: object):  # type: ignore[no-untyped-def]
    env = env or SQLEnv()
    state = env.seed(_task(gold, **meta))
    try:
        return env.verify(state, Trajectory(final_answer=answer))
    finally:
        env.close(state)


def test_bundled_tasks_gold_passes_and_null_scores_zero() -> None:
    env = SQLEnv()
    tasks = env.examples()
    assert len(tasks) >= 20 and {t.metadata["db"] for t in tasks} == {"shop", "school"}
    for task in tasks:
        state = env.seed(task)
        try:
            gold = db.run(state.conn, task.metadata["gold_sql"], time_limit_s=2, max_rows=1000)
            assert gold.rows, task.id  # an empty gold result would make wrong queries look right
            verdict = env.verify(state, Trajectory(final_answer=env.reference(task).final_answer))
            assert verdict.reward == 1.0 and verdict.passed, (task.id, verdict.metadata)
            assert env.verify(state, Trajectory(final_answer="")).reward == 0.0
        finally:
            env.close(state)


def test_equivalent_queries_score_and_wrong_ones_do_not() -> None:
    gold = "SELECT name FROM t WHERE score > 1.8"
    assert _verify(gold, "```sql\nSELECT t.name FROM t WHERE NOT score <= 1.8;\n```").passed
    assert _verify(gold, "SELECT name FROM t WHERE score >= 2 ORDER BY name DESC").passed
    wrong = _verify(gold, "SELECT name FROM t")
    assert wrong.reward == 0.0 and wrong.components == {"executes": 1.0, "result_match": 0.0}
    cols = _verify(gold, "SELECT name, id FROM t WHERE score > 1.8")
    assert cols.metadata["detail"] == "2 column(s), expected 1"


def test_order_matters_only_when_the_gold_query_orders() -> None:
    gold = "SELECT name FROM t ORDER BY score"
    assert _verify(gold, "SELECT name FROM t ORDER BY score ASC").passed
    reversed_ = _verify(gold, "SELECT name FROM t ORDER BY score DESC")
    assert not reversed_.passed and "different order" in reversed_.metadata["detail"]
    assert not db.has_top_level_order_by("SELECT * FROM (SELECT id FROM t ORDER BY id) WHERE id > 'order by'")
    assert db.has_top_level_order_by("select id from t -- note\n order  by id")


def test_numbers_compare_by_value() -> None:
    assert _verify("SELECT SUM(score) FROM t", "SELECT 6.5").passed
    assert _verify("SELECT COUNT(*) FROM t", "SELECT 3.0").passed
    assert not _verify("SELECT COUNT(*) FROM t", "SELECT '3'").passed


@pytest.mark.parametrize(("query", "fragment"), [
    ("DELETE FROM t", "not authorized"),
    ("UPDATE t SET name = 'x'", "not authorized"),
    ("PRAGMA query_only = OFF", "not authorized"),
    ("ATTACH DATABASE ':memory:' AS other", "not authorized"),
    ("SELECT 1; DROP TABLE t", "one statement"),
    ("SELECT nope FROM t", "no such column"),
])
def test_queries_run_read_only_and_errors_score_zero(query: str, fragment: str) -> None:
    verdict = _verify("SELECT COUNT(*) FROM t", query)
    assert verdict.reward == 0.0 and verdict.metadata["reason"] == "query_error"
    assert fragment in verdict.metadata["error"]


def test_a_runaway_query_is_stopped_at_the_time_limit() -> None:
    env = SQLEnv(time_limit_s=0.2)
    started = time.monotonic()
    verdict = _verify("SELECT 1", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                      "SELECT COUNT(*) FROM c", env=env)
    assert time.monotonic() - started < 30  # the query never ends on its own: any bound shows the stop
    assert verdict.reward == 0.0 and "time limit of 0.2 s" in verdict.metadata["error"]


def test_too_many_rows_is_an_error() -> None:
    env = SQLEnv(max_rows=2)
    verdict = _verify("SELECT id FROM t LIMIT 1", "SELECT id FROM t", env=env)
    assert verdict.metadata["error"] == "the query returns more than 2 rows"


def test_run_query_tool_shows_rows_and_errors_are_tool_errors() -> None:
    env = SQLEnv(tool_rows=2)
    state = env.seed(_task("SELECT 1"))
    try:
        out = env.run_query(state, "SELECT id, name FROM t ORDER BY id")
        assert out.splitlines() == ["id | name", "1 | a", "2 | b", "... 1 more row(s)", "(3 row(s))"]
        with pytest.raises(ToolError, match="not authorized"):
            env.run_query(state, "DROP TABLE t")
        assert env.run_query(state, "SELECT COUNT(*) FROM t").splitlines()[1] == "3"
    finally:
        env.close(state)
    with pytest.raises(sqlite3.ProgrammingError):
        state.conn.execute("SELECT 1")


def test_sql_extraction() -> None:
    assert extract_sql("First:\n```sql\nSELECT 1\n```\nFinal:\n```sql\nSELECT 2;\n```") == "SELECT 2"
    assert extract_sql("```\nSELECT 3\n```") == "SELECT 3"
    assert extract_sql("  SELECT 4; ") == "SELECT 4"


def test_bad_tasks_and_a_failing_gold_query() -> None:
    env = SQLEnv()
    with pytest.raises(InvalidTask, match="known: school, shop"):
        env.check_task(Task(id="t", metadata={"db": "nope", "gold_sql": "SELECT 1"}))
    with pytest.raises(InvalidTask, match="no metadata.gold_sql"):
        env.check_task(Task(id="t", metadata={"db": "shop"}))
    with pytest.raises(VerifierError, match="the gold query fails"):
        _verify("SELECT nope FROM t", "SELECT 1")


def test_prompt_includes_the_schema() -> None:
    task = SQLEnv().examples()[0]
    content = SQLEnv().prompt(task)[-1]["content"]
    assert "CREATE TABLE customers" in content and "```sql" in content
