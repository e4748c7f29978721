"""Hostile task files: ``load_task_file`` and ``parse_row`` on arbitrary lines and rows.

Promise under test: a task file never crashes the loader. Every non-blank line becomes a task or at
least one problem that names ``file:line: field '...'``; every accepted task can be snapshotted and read
back (``write_tasks``/``read_tasks``, what ``eval run`` does before the first rollout).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from fuzz_strategies import INTEGERS, JSON, JSON_OBJECTS, STRINGS, TEXT, ci, long, maybe, nested, shaped_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task
from palaestra.rollout.tasks import load_task_file, parse_row, read_tasks, write_tasks

# Nesting depths around the limits that once broke the loader (see the regression tests at the end): writing
# back stops at 255, orjson reads up to 1024 and rejects deeper rows as invalid JSON.
DEPTHS = [1, 50, 250, 300, 1000, 1100, 5000]

MESSAGES = st.lists(shaped_dict({"role": st.sampled_from(["user", "system", "assistant", "developer", "tool"]),
                                 "content": STRINGS | st.lists(JSON_OBJECTS, max_size=2)}), max_size=3)
PALAESTRA_ROW = shaped_dict({
    "id": STRINGS | INTEGERS, "env": st.sampled_from(["", "mcqa", "workplace", "x"]), "agent": STRINGS,
    "model": STRINGS, "input": STRINGS | MESSAGES, "tools": st.lists(JSON_OBJECTS, max_size=2),
    "metadata": JSON_OBJECTS, "tags": st.lists(TEXT, max_size=3),
})
NEMO_ITEM = shaped_dict({"role": st.sampled_from(["user", "system", "developer"]), "type": st.just("message"),
                         "content": STRINGS | st.lists(shaped_dict({"type": st.sampled_from(
                             ["input_text", "text", "output_text", "input_image"]), "text": STRINGS}), max_size=3)})
NEMO_ROW = st.builds(
    lambda params, top: {"responses_create_params": params, **top},
    maybe(shaped_dict({"input": STRINGS | st.lists(NEMO_ITEM, max_size=3), "instructions": STRINGS,
                       "tools": st.lists(JSON_OBJECTS, max_size=2), "temperature": JSON,
                       "max_output_tokens": INTEGERS, "top_p": JSON})),
    shaped_dict({"id": STRINGS | INTEGERS, "uuid": STRINGS, "task_id": STRINGS, "agent_ref": JSON_OBJECTS,
                 "expected_answer": STRINGS, "verifier_metadata": JSON_OBJECTS}),
)
ROWS = st.one_of(PALAESTRA_ROW, PALAESTRA_ROW, NEMO_ROW, NEMO_ROW, JSON)


def _deep(depth: int) -> bytes:
    """A row nesting ``depth`` arrays: inside metadata while orjson accepts it, bare beyond its limit."""
    arrays = b"[" * depth + b"]" * depth
    return b'{"id": "deep", "env": "x", "metadata": {"k": ' + arrays + b"}}" if depth <= 1024 else arrays


def _line(row: Any, how: str, depth: int) -> bytes:
    """One line of a task file: the row as JSON, or a damaged/odd rendering of it."""
    if how == "deep":
        return _deep(depth)
    text = json.dumps(row, ensure_ascii=False)
    data = text.encode("utf-8")
    return {
        "plain": data,
        "ascii": json.dumps(row).encode(),
        "truncated": data[: max(1, len(data) // 2)],
        "latin1": text.encode("latin-1", "replace"),
        "junk_bytes": data[:3] + b"\xff\xfe\x80" + data[3:],
        "crlf": data + b"\r",
        "bom": b"\xef\xbb\xbf" + data,
        "nul": data + b"\x00",
        "huge_number": b'{"id": "n", "env": "x", "metadata": {"v": 1' + b"0" * 400 + b"}}",
        "infinity": b'{"id": "i", "env": "x", "metadata": {"v": 1e400}}',
        "nan": b'{"id": "nan", "env": "x", "metadata": {"v": NaN}}',
        "lone_surrogate": b'{"id": "s", "env": "x", "input": "\\ud800"}',
    }[how]


HOWS = st.sampled_from(["plain", "plain", "plain", "deep", "ascii", "truncated", "latin1", "junk_bytes", "crlf", "bom",
                        "nul", "huge_number", "infinity", "nan", "lone_surrogate"])
LINES = st.lists(st.tuples(ROWS, HOWS, st.sampled_from(DEPTHS), st.booleans()),
                 min_size=1, max_size=6)
PROBLEM = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): field '(?P<field>[^']+)': (?P<msg>.+)$", re.DOTALL)


def _check_file(tmp: Path, lines: list[tuple[Any, str, int, bool]], default_env: str) -> None:
    path = tmp / "tasks.jsonl"
    raw = [_line(row, how, depth) for row, how, depth, _ in lines]
    body = b"".join(b + (b"\n\n" if blank else b"\n") for b, (_, _, _, blank) in zip(raw, lines))
    path.write_bytes(body if lines[-1][3] else body.rstrip(b"\n"))  # sometimes no final newline
    try:
        loaded = load_task_file(path, default_env)
    except InvalidTask:
        return  # documented: the loader refused the whole file with a clear error
    n_lines = len(path.read_bytes().split(b"\n"))
    problem_lines: set[int] = set()
    for p in loaded.problems:
        m = PROBLEM.match(str(p))
        assert m, f"problem does not name file:line:field: {p!s}"
        assert m["file"] == "tasks.jsonl" and p.field.strip() and p.message.strip()
        assert 1 <= p.line <= n_lines, f"problem names line {p.line} of a {n_lines}-line file"
        problem_lines.add(p.line)
    non_blank = sum(1 for chunk in path.read_bytes().split(b"\n") if chunk.strip())
    assert len(loaded.tasks) + len(problem_lines) == non_blank, "every non-blank line is a task or a problem"
    ids = [t.id for t in loaded.tasks]
    assert len(ids) == len(set(ids)), "duplicate ids must be reported, not loaded"
    for t in loaded.tasks:
        assert isinstance(t, Task) and isinstance(t.id, str) and t.env
    snapshot = tmp / "snapshot.jsonl"
    write_tasks(snapshot, loaded.tasks)  # what eval run does first: it must not fail on an accepted task
    assert [t.id for t in read_tasks(snapshot)] == ids


def _files_property(cfg: settings, tmp: Path) -> None:
    @cfg
    @given(LINES, st.sampled_from(["", "mcqa"]))
    def prop(lines: list[tuple[Any, str, int, bool]], default_env: str) -> None:
        _check_file(tmp, lines, default_env)

    prop()


def _rows_property(cfg: settings) -> None:
    @cfg
    @given(ROWS, STRINGS, st.sampled_from(["", "mcqa"]))
    def prop(row: Any, default_id: str, default_env: str) -> None:
        try:
            task = parse_row(row, default_id, default_env)
        except ValueError as exc:  # ValidationError is a ValueError; both name the field
            assert str(exc).strip()
            return
        assert isinstance(task, Task) and isinstance(task.id, str)

    prop()


def test_task_files_never_crash_the_loader(tmp_path: Path) -> None:
    _files_property(ci(120), tmp_path)


def test_parse_row_raises_only_value_errors() -> None:
    _rows_property(ci(150))


@pytest.mark.fuzz
@pytest.mark.timeout(1800)
def test_task_files_long(tmp_path: Path) -> None:
    _files_property(long(5000), tmp_path)


@pytest.mark.fuzz
@pytest.mark.timeout(1800)
def test_parse_row_long() -> None:
    _rows_property(long(20000))


def test_missing_file_is_invalid_task(tmp_path: Path) -> None:
    with pytest.raises(InvalidTask, match="task file not found"):
        load_task_file(tmp_path / "nope.jsonl")


def test_binary_file_reports_each_line(tmp_path: Path) -> None:
    path = tmp_path / "blob.jsonl"
    path.write_bytes(b"\x00\x01\x02\xff\n\x89PNG\r\n\x1a\n" + bytes(range(11, 256)) + b"\n")
    loaded = load_task_file(path, "mcqa")
    assert not loaded.tasks
    assert {p.line for p in loaded.problems} == {1, 2, 3, 4} and all(p.field == "(line)" for p in loaded.problems)


# ---- bugs this suite found (fixed; kept as regression tests) ------------------------------------------
@pytest.mark.parametrize("nemo", [False, True], ids=["palaestra", "nemo_gym"])
def test_deep_id_is_a_problem_not_a_crash(tmp_path: Path, nemo: bool) -> None:
    deep = "[" * 1000 + "]" * 1000
    row = ('{"responses_create_params": {"input": "hi"}, "id": %s}' if nemo else '{"id": %s, "env": "x"}') % deep
    path = tmp_path / "t.jsonl"
    path.write_text(row + "\n")
    loaded = load_task_file(path, "mcqa")
    assert not loaded.tasks and [p.field for p in loaded.problems] == ["id"]


def test_row_that_cannot_be_snapshotted_is_a_problem(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"id": "deep", "env": "x", "metadata": {"k": nested(300)}}) + "\n")
    loaded = load_task_file(path)
    if loaded.tasks:
        write_tasks(tmp_path / "snapshot.jsonl", loaded.tasks)
    assert not loaded.tasks and loaded.problems and loaded.problems[0].field.startswith("metadata")


def test_the_snapshot_holds_each_task_as_it_encodes(tmp_path: Path) -> None:
    """``write_tasks`` writes the line the row check encoded (``tasks.task_line``) for a task it checked, and
    encodes any other task itself: a copy made since (whose line differs) included."""
    from palaestra.rollout import tasks as tasks_mod

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"id": f"t{i}", "env": "mcqa", "input": f"q{i}", "metadata": {"n": i}}) + "\n"
                            for i in range(3)))
    loaded = load_task_file(path)
    assert all(id(t) in tasks_mod._LINES for t in loaded.tasks)
    changed = loaded.tasks[1].model_copy(update={"input": "changed"})
    written = [loaded.tasks[0], changed, loaded.tasks[2]]
    write_tasks(tmp_path / "snapshot.jsonl", written)
    lines = (tmp_path / "snapshot.jsonl").read_bytes().splitlines(keepends=True)
    assert lines == [orjson.dumps(t.model_dump(mode="json", exclude_none=True)) + b"\n" for t in written]
    assert b"changed" in lines[1]
    assert not any(id(t) in tasks_mod._LINES for t in (loaded.tasks[0], loaded.tasks[2]))  # taken out as written


@pytest.mark.parametrize("params", [
    {"input": [{"type": ["message"], "role": "user", "content": "q"}]},  # an item type that is a list
    {"input": "q", "tools": [{"type": {"function": 1}, "name": "f"}]},  # a tool type that is a dict
    {"input": "q", "tools": [{"type": "function", "function": ["f"]}]},  # a function that is no object
])
def test_unhashable_or_odd_nemo_types_are_named_row_problems(params: dict[str, object]) -> None:
    """Found by the property above: such a row raised TypeError out of the loader instead of a row problem."""
    with pytest.raises(ValueError, match="responses_create_params"):
        parse_row({"responses_create_params": params, "id": "x"}, "L1", "mcqa")
