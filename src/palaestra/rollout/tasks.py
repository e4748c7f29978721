"""Reading task rows: Palaestra rows (DESIGN §2) and NeMo Gym rows as they are, from JSONL or Parquet.

A malformed row is reported with its file, line and field; the run refuses to start until it is fixed
(or the caller chooses to skip invalid rows, and is told which were skipped)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from palaestra.adapters import nemo_gym_families as nemo_families
from palaestra.adapters import nemo_gym_rows as nemo_rows
from palaestra.adapters.nemo_gym_rows import to_native
from palaestra.core.errors import InvalidTask, PalaestraError
from palaestra.core.records import Task
from palaestra.rollout.plain import plain_line

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


def _row_id(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError("id: must be a string or a number")
    return str(value)


# Responses input item types a row may hold (others, e.g. hosted-tool calls, cannot be replayed to a model).
_NEMO_ITEM_TYPES = {"message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
                    "custom_tool_call_output", "item_reference"}
_NEMO_TOOL_TYPES = {"function", "custom"}


def _check_nemo_request(params: dict[str, Any]) -> None:
    """Refuse, naming the field, what the Responses request holds that no model could be sent."""
    raw_input = params.get("input")
    if isinstance(raw_input, list):
        for i, item in enumerate(raw_input):
            if not isinstance(item, dict):
                raise ValueError(f"responses_create_params.input[{i}]: expected an input item (an object)")
            kind = item.get("type", "message")
            if not isinstance(kind, str) or kind not in _NEMO_ITEM_TYPES:  # (a list or dict is no type either)
                raise ValueError(f"responses_create_params.input[{i}]: unknown input item type {kind!r} "
                                 f"(known: {', '.join(sorted(_NEMO_ITEM_TYPES))})")
            if kind == "message" and not isinstance(item.get("role"), str):
                raise ValueError(f"responses_create_params.input[{i}]: expected a message with a 'role'")
    elif not isinstance(raw_input, str):
        raise ValueError("responses_create_params.input: must be a string or a list of input items")
    tools = params.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ValueError("responses_create_params.tools: must be a list")
    for i, tool in enumerate(tools or []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(kind, str) or kind not in _NEMO_TOOL_TYPES:
            raise ValueError(f"responses_create_params.tools[{i}]: tool type {kind!r} cannot be offered to a model "
                             "through Palaestra (function and custom tools can)")
        fn = tool.get("function")
        if kind == "function" and not isinstance(tool.get("name") or (fn.get("name") if isinstance(fn, dict) else None),
                                                 str):
            raise ValueError(f"responses_create_params.tools[{i}]: a function tool needs a 'name'")


def from_nemo_gym(row: dict[str, Any], default_id: str, default_env: str,
                  routes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Map a NeMo Gym row to a Palaestra task row, keeping every verifier field in ``metadata``.

    The Responses request is translated exactly into chat messages and tools (every input item type:
    messages with content parts, reasoning, function calls and their outputs; flat and Chat-style tools)
    and also kept as it is (``metadata.nemo_gym_request``), with its per-call settings (``tool_choice``,
    ``parallel_tool_calls``, sampling) applied to every model call of the rollout. ``agent_ref`` routes
    the row (``adapters.nemo_gym_families.route_agent_ref``); ``default_env`` serves rows it does not."""
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        raise ValueError("responses_create_params: must be an object")
    _check_nemo_request(params)
    chat = nemo_rows.chat_request(params)
    raw_input = params["input"]
    messages: Any = raw_input if isinstance(raw_input, str) and not params.get("instructions") else chat["messages"]
    metadata = {k: v for k, v in row.items() if k not in _NEMO_STRUCTURAL}
    agent_ref = row.get("agent_ref")
    if agent_ref is not None:
        metadata[nemo_rows.AGENT_REF_KEY] = agent_ref
    sampling = {k: params[k] for k in ("temperature", "max_output_tokens", "top_p") if params.get(k) is not None}
    if sampling:
        metadata[nemo_rows.SAMPLING_KEY] = sampling
    metadata[nemo_rows.REQUEST_KEY] = params
    server, routed = nemo_families.route_agent_ref(agent_ref, routes)
    env = routed or default_env
    if env and env.startswith("nemo_gym:"):  # its server reads the row's own identifiers back
        metadata[nemo_rows.ROW_IDS_KEY] = {k: row[k] for k in ("id", "uuid", "task_id") if k in row}
    if not env and server is not None and (why := nemo_families.refusal(server)):
        raise ValueError(f"agent_ref: resources server '{server}' is not graded natively: {why}")
    out: dict[str, Any] = {
        "id": _row_id(row.get("id") or row.get("uuid") or row.get("task_id") or default_id),
        "env": env,
        "input": messages,
        "metadata": to_native(env, metadata, server) if env else metadata,
    }
    if chat.get("tools"):
        out["tools"] = chat["tools"]
    has_input = bool(messages) if isinstance(messages, str) else any(
        isinstance(m, dict) and m.get("content") for m in messages)
    if env and (agent := nemo_families.row_agent(env, agent_ref, has_input)):  # NeMo Gym's agent builds its prompt
        out["agent"] = agent
    return out


def parse_row(row: Any, default_id: str, default_env: str, routes: Mapping[str, str] | None = None) -> Task:
    if not isinstance(row, dict):
        raise ValueError("(row): expected a JSON object")
    if "responses_create_params" in row:
        row = from_nemo_gym(row, default_id, default_env, routes)
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


def load_task_file(path: str | Path, default_env: str = "", routes: Mapping[str, str] | None = None) -> LoadedTasks:
    """Read and validate every row; problems are collected (not raised) so all are reported at once.
    ``routes`` maps NeMo Gym agent names to environments (from NeMo Gym config files)."""
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
            task = parse_row(row, f"L{lineno}", default_env, routes)
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
            task_line(task)
        except (TypeError, ValueError, RecursionError) as exc:
            out.problems.append(RowProblem(p.name, lineno, "metadata", f"nests too deep to store ({exc})"))
            continue
        if not task.env:
            ref = task.metadata.get(nemo_rows.AGENT_REF_KEY)
            if isinstance(ref, dict) and ref.get("name"):  # a NeMo Gym row whose agent routes nowhere known
                out.problems.append(RowProblem(
                    p.name, lineno, "agent_ref", f"agent '{ref['name']}' names no resources server Palaestra has "
                    "an environment for", "pass --env, or give the NeMo Gym config that defines the agent as "
                    "--config (families: " + ", ".join(nemo_families.graded_families()) + ")"))
                continue
            out.problems.append(RowProblem(p.name, lineno, "env", "no environment: name one in the row or pass --env"))
            continue
        if task.id in seen and nemo_rows.REQUEST_KEY in task.metadata:
            task = nemo_rows.unique_id(task, lineno, seen)  # NeMo Gym repeats ids: keep the row, say so
        if task.id in seen:
            out.problems.append(RowProblem(p.name, lineno, "id",
                                           f"duplicate id '{task.id}' (first at line {seen[task.id]})"))
            continue
        seen[task.id] = lineno
        out.tasks.append(task)
        out.lines.append(lineno)
    return out


# The snapshot line of each task ``load_task_file`` checked, by identity, with the task itself (so its id
# cannot be reused while the entry lives): the check encodes the very line ``write_tasks`` then writes, and
# encoding is most of what checking a row costs. ``write_tasks`` takes its lines out; the bound keeps a
# process that reads task files without writing a snapshot (``model serve --tasks``) from growing. A task
# not found here (a copy made since, one of a larger run) is simply encoded again.
_LINES: dict[int, tuple[Task, bytes]] = {}
_LINES_MAX = 20_000


_TASK_FIELDS = tuple(Task.model_fields)


def _encoded(task: Task) -> bytes:
    """``task.model_dump(mode="json", exclude_none=True)`` as a line. A row read from JSON holds JSON data
    only, so its fields (declared ones first, then extras; the None ones left out, as that dump leaves
    them) are encoded as they are, checked by the encoding itself (``rollout.plain.plain_line``); anything
    else is dumped by pydantic. The same bytes either way."""
    if type(task) is Task:
        values = task.__dict__
        data = {name: values[name] for name in _TASK_FIELDS if values.get(name) is not None}
        extra = task.__pydantic_extra__
        if extra:
            data.update((k, v) for k, v in extra.items() if v is not None)
        line = plain_line(data)
        if line is not None:
            return line
    return orjson.dumps(task.model_dump(mode="json", exclude_none=True), option=orjson.OPT_APPEND_NEWLINE)


def task_line(task: Task) -> bytes:
    """``task`` as one line of tasks.jsonl (its newline included), remembered for ``write_tasks``. Raises
    TypeError, ValueError or RecursionError for a task JSON cannot hold."""
    line = _encoded(task)
    if len(_LINES) >= _LINES_MAX:
        del _LINES[next(iter(_LINES))]  # the oldest first
    _LINES[id(task)] = (task, line)
    return line


def write_tasks(path: Path, tasks: list[Task]) -> None:
    """Snapshot the run's tasks, so resume and reverify never depend on the original file."""
    with path.open("wb") as fh:
        for t in tasks:
            hit = _LINES.pop(id(t), None)
            fh.write(hit[1] if hit is not None and hit[0] is t else _encoded(t))


def read_tasks(path: Path) -> list[Task]:
    with path.open("rb") as fh:
        return [Task.model_validate(orjson.loads(line)) for line in fh if line.strip()]
