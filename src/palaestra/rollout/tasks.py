"""Reading task rows: Palaestra rows (DESIGN §2) and NeMo Gym rows as they are, from JSONL or Parquet.

A malformed row is reported with its file, line and field; the run refuses to start until it is fixed
(or the caller chooses to skip invalid rows, and is told which were skipped)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from palaestra.core.errors import InvalidTask, PalaestraError
from palaestra.core.records import Task

# NeMo Gym rows: these keys are structure; every other top-level key is verifier metadata.
_NEMO_STRUCTURAL = {"responses_create_params", "agent_ref", "id", "uuid", "task_id"}


@dataclass
class RowProblem:
    file: str
    line: int
    field: str
    message: str
    fix: str | None = None

    def __str__(self) -> str:
        text = f"{self.file}:{self.line}: field '{self.field}': {self.message}"
        return f"{text} (fix: {self.fix})" if self.fix else text


@dataclass
class LoadedTasks:
    tasks: list[Task] = field(default_factory=list)
    problems: list[RowProblem] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # the line (Parquet: row) of each task, in step with tasks


_FIELD_IN_MESSAGE = re.compile(r"\b((?:metadata|input|tools|responses_create_params)(?:\.[A-Za-z_][\w-]*)*)")


def problem_from_check(file: str, line: int, exc: Exception) -> RowProblem:
    """A RowProblem from an environment's ``check_task`` refusal. The field is the error's own ``field``
    when it has one, else the first row field the message names (``metadata.expected_answer``), else
    the row as a whole; the fix is the error's hint."""
    if isinstance(exc, PalaestraError):
        message, hint = exc.message, exc.hint
    else:  # a check that crashed: still this row's problem, and said as what it is
        message, hint = f"the environment's check_task raised {type(exc).__name__}: {exc}", None
    fld = getattr(exc, "field", None)
    if not isinstance(fld, str) or not fld:
        found = _FIELD_IN_MESSAGE.search(message)
        fld = found.group(1) if found else "(row)"
    return RowProblem(file, line, fld, message, hint)


def _content_text(content: Any) -> Any:
    """Responses-API content parts ({"type": "input_text", "text": ...}) become plain chat content."""
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        texts = [p.get("text") for p in content if p.get("type") in ("input_text", "text", "output_text")]
        if len(texts) == len(content) and all(isinstance(t, str) for t in texts):
            return "".join(t for t in texts if t)
    return content


def _row_id(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError("id: must be a string or a number")
    return str(value)


def from_nemo_gym(row: dict[str, Any], default_id: str, default_env: str) -> dict[str, Any]:
    """Map a NeMo Gym row to a Palaestra task row, keeping every verifier field in ``metadata``."""
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        raise ValueError("responses_create_params: must be an object")
    raw_input = params.get("input")
    if isinstance(raw_input, str):
        messages: Any = raw_input
    elif isinstance(raw_input, list):
        messages = []
        for i, item in enumerate(raw_input):
            if not isinstance(item, dict) or "role" not in item:
                raise ValueError(f"responses_create_params.input[{i}]: expected a message with a 'role'")
            messages.append({"role": item["role"], "content": _content_text(item.get("content"))})
    else:
        raise ValueError("responses_create_params.input: must be a string or a list of messages")
    if isinstance(params.get("instructions"), str) and isinstance(messages, list):
        messages.insert(0, {"role": "system", "content": params["instructions"]})
    metadata = {k: v for k, v in row.items() if k not in _NEMO_STRUCTURAL}
    agent_ref = row.get("agent_ref")
    if agent_ref is not None:
        metadata["nemo_gym_agent_ref"] = agent_ref
    sampling = {k: params[k] for k in ("temperature", "max_output_tokens", "top_p") if k in params}
    if sampling:
        metadata["nemo_gym_sampling"] = sampling
    out: dict[str, Any] = {
        "id": _row_id(row.get("id") or row.get("uuid") or row.get("task_id") or default_id),
        "env": default_env,
        "input": messages,
        "metadata": metadata,
    }
    if params.get("tools"):
        out["tools"] = params["tools"]
    return out


def parse_row(row: Any, default_id: str, default_env: str) -> Task:
    if not isinstance(row, dict):
        raise ValueError("(row): expected a JSON object")
    if "responses_create_params" in row:
        row = from_nemo_gym(row, default_id, default_env)
    else:
        row = dict(row)
        row.setdefault("id", default_id)
        if row.get("id") is not None and not isinstance(row["id"], str):
            if not isinstance(row["id"], (int, float)) or isinstance(row["id"], bool):
                raise ValueError("id: must be a string or a number")
            row["id"] = str(row["id"])
        if not row.get("env"):
            row["env"] = default_env
    return Task.model_validate(row)


def _read_rows(path: Path) -> list[tuple[int, Any, str | None]]:
    """(line number, parsed row or None, JSON error) per non-blank line; Parquet rows count from 1."""
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise InvalidTask(f"{path}: reading Parquet needs pyarrow",
                              hint="pip install 'palaestra[parquet]'") from None
        return [(i + 1, r, None) for i, r in enumerate(pq.read_table(path).to_pylist())]
    rows: list[tuple[int, Any, str | None]] = []
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append((lineno, orjson.loads(line), None))
            except orjson.JSONDecodeError as exc:
                rows.append((lineno, None, f"not valid JSON: {exc}"))
    return rows


def load_task_file(path: str | Path, default_env: str = "") -> LoadedTasks:
    """Read and validate every row; problems are collected (not raised) so all are reported at once."""
    p = Path(path)
    if not p.is_file():
        raise InvalidTask(f"task file not found: {p}", hint="give --input a JSONL or Parquet file")
    out = LoadedTasks()
    seen: dict[str, int] = {}
    for lineno, row, err in _read_rows(p):
        if err is not None:
            out.problems.append(RowProblem(p.name, lineno, "(line)", err))
            continue
        try:
            task = parse_row(row, f"L{lineno}", default_env)
        except ValidationError as exc:
            for e in exc.errors():
                out.problems.append(RowProblem(p.name, lineno, ".".join(str(x) for x in e["loc"]), e["msg"]))
            continue
        except ValueError as exc:
            fld, _, msg = str(exc).partition(": ")
            out.problems.append(RowProblem(p.name, lineno, fld, msg or str(exc)))
            continue
        except RecursionError:
            out.problems.append(RowProblem(p.name, lineno, "id", "must be a string or a number (this one nests "
                                                               "too deep to read)"))
            continue
        try:  # the run snapshots its tasks first: a row that cannot be written back is refused here
            orjson.dumps(task.model_dump(mode="json", exclude_none=True))
        except (TypeError, ValueError, RecursionError) as exc:
            out.problems.append(RowProblem(p.name, lineno, "metadata", f"nests too deep to store ({exc})"))
            continue
        if not task.env:
            out.problems.append(RowProblem(p.name, lineno, "env", "no environment: name one in the row or pass --env"))
            continue
        if task.id in seen:
            out.problems.append(RowProblem(p.name, lineno, "id",
                                           f"duplicate id '{task.id}' (first at line {seen[task.id]})"))
            continue
        seen[task.id] = lineno
        out.tasks.append(task)
        out.lines.append(lineno)
    return out


def write_tasks(path: Path, tasks: list[Task]) -> None:
    """Snapshot the run's tasks, so resume and reverify never depend on the original file."""
    with path.open("wb") as fh:
        for t in tasks:
            fh.write(orjson.dumps(t.model_dump(mode="json", exclude_none=True)) + b"\n")


def read_tasks(path: Path) -> list[Task]:
    with path.open("rb") as fh:
        return [Task.model_validate(orjson.loads(line)) for line in fh if line.strip()]
