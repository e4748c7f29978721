"""Reading the compact journal back: ``expand_record`` is the one inverse of ``compact_record`` (format:
``rollout/compact.py``), and every reader that needs full requests (report, training exports, reverify,
metrics) goes through it; ``RunTasks`` finds a record's task in ``tasks.jsonl``."""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from palaestra.core.records import Task
from palaestra.rollout.compact_format import (
    _LITERAL,
    _PREFIX,
    _SAME,
    _TASK_TEXT,
    _TRAJECTORY,
    CompactError,
    TaskLookup,
    _input_texts,
    _is_marker,
    _Texts,
    map_message_text,
    task_texts,
)

log = logging.getLogger(__name__)

# ---- expansion -------------------------------------------------------------------------------------

def is_compact(rec: Mapping[str, Any]) -> bool:
    return isinstance(rec.get("compact"), Mapping)


def _resolve_texts(info: Mapping[str, Any], rec: Mapping[str, Any], tasks: TaskLookup | None) -> list[str]:
    ref = info.get("task")
    if not isinstance(ref, Mapping):
        raise CompactError("compact record names no task")
    task_id = str(ref.get("id", rec.get("task_id", "")))
    task = tasks.get(task_id) if tasks is not None else None
    if task is None:
        raise CompactError(f"rollout {rec.get('rollout_id', '?')} references task {task_id!r}, which "
                           "is not in the run's tasks.jsonl",
                           hint="keep tasks.jsonl beside rollouts.jsonl: records store the task only by reference")
    if isinstance(task, _Texts):
        texts = task
    elif isinstance(task, Task):
        texts = task_texts(task)
    elif isinstance(task, Mapping):
        texts = _Texts(task, _input_texts(task.get("input", "")))
    else:
        raise CompactError(f"task lookup gave {type(task).__name__} for task {task_id!r}, not a task")
    if len(texts.texts) != ref.get("texts") or texts.digest != ref.get("digest"):
        raise CompactError(f"task {task_id!r} in tasks.jsonl differs from the one rollout "
                           f"{rec.get('rollout_id', '?')} ran (input digest mismatch)",
                           hint="the records reference the task snapshot written with the run; restore it")
    return texts.texts


class _TextExpander:
    def __init__(self, texts: list[str] | None, problem: str | None) -> None:
        self.texts, self.problem = texts, problem

    def text(self, value: Any) -> Any:
        if type(value) is dict:
            if _LITERAL in value:
                return value[_LITERAL]
            if _TASK_TEXT in value:
                i, n = value[_TASK_TEXT], value.get("n")
                if self.texts is None:
                    middle = f"[task text #{i} not available: {self.problem}]"
                elif not (type(i) is int and 0 <= i < len(self.texts)
                          and type(n) is int and 0 <= n <= len(self.texts[i])):
                    raise CompactError(f"bad task text reference {i!r}/{n!r}")
                else:
                    middle = self.texts[i][:n]
                return f"{value.get('pre', '')}{middle}{value.get('post', '')}"
        return value

    def message(self, m: Any) -> Any:
        return map_message_text(m, self.text)


def expand_record(rec: Mapping[str, Any], tasks: TaskLookup | None = None, *,
                  strict: bool = True) -> dict[str, Any]:
    """The full record (every request whole) from its journal form; records that are not compact come
    back as they are. ``tasks`` finds the record's task by id (a dict of Tasks, or ``RunTasks`` over
    the run's tasks.jsonl). With ``strict`` a task that cannot be found, or differs, raises
    CompactError; otherwise its texts read as a placeholder saying why (for viewers).

    The result shares unchanged values with ``rec``, and expanded requests share message objects with
    each other: copy before mutating.
    """
    info = rec.get("compact")
    if not isinstance(info, Mapping):
        return dict(rec)
    try:
        return _expand(rec, info, tasks, strict)
    except (TypeError, KeyError, IndexError, AttributeError, ValueError) as exc:  # a damaged or edited line
        raise CompactError(f"rollout {rec.get('rollout_id', '?')} is a malformed compact record: "
                           f"{type(exc).__name__}: {exc}") from exc


def _expand(rec: Mapping[str, Any], info: Mapping[str, Any], tasks: TaskLookup | None,
            strict: bool) -> dict[str, Any]:
    out = {k: v for k, v in rec.items() if k != "compact"}
    traj = out.get("trajectory")
    if not isinstance(traj, Mapping):
        return out
    traj = out["trajectory"] = dict(traj)
    texts = problem = None
    if "task" in info:
        try:
            texts = _resolve_texts(info, rec, tasks)
        except CompactError as exc:
            if strict:
                raise
            problem = exc.message
    tx = _TextExpander(texts, problem) if "task" in info else None
    messages = traj.get("messages")
    if isinstance(messages, list) and tx is not None:
        messages = traj["messages"] = [tx.message(m) for m in messages]
    full_messages: list[list[Any] | None] = []
    calls = traj.get("model_calls")
    new_calls: list[Any] = []
    for k, call in enumerate(calls if isinstance(calls, list) else []):
        if not isinstance(call, Mapping):
            full_messages.append(None)
            new_calls.append(call)
            continue
        call = dict(call)
        request = call.get("request")
        sent: list[Any] | None = None
        if isinstance(request, Mapping):
            request = call["request"] = dict(request)
            stored = request.get("messages")
            if isinstance(stored, list):
                sent = _expand_messages(stored, k, messages, full_messages, tx)
                request["messages"] = sent
            tools: Any = request.get("tools")
            if _is_marker(tools, _LITERAL):
                request["tools"] = tools[_LITERAL]
            elif _is_marker(tools, _SAME):
                src = tools[_SAME]
                prev = new_calls[src] if type(src) is int and 0 <= src < k else None
                if not isinstance(prev, Mapping) or "tools" not in (prev.get("request") or {}):
                    raise CompactError(f"call {k} reuses the tools of call {src!r}, which has none")
                request["tools"] = prev["request"]["tools"]
        full_messages.append(sent)
        ids = call.get("prompt_token_ids")
        if isinstance(ids, list) and ids and _is_marker(ids[0], _PREFIX):
            call["prompt_token_ids"] = _expand_tokens(ids, k, new_calls)
        if tx is not None:
            call["response"] = _expand_response(call.get("response"), tx)
        new_calls.append(call)
    if isinstance(calls, list):
        traj["model_calls"] = new_calls
    return out


def _expand_messages(stored: list[Any], k: int, trajectory: list[Any] | None,
                     earlier: list[list[Any] | None], tx: _TextExpander | None) -> list[Any]:
    head: list[Any] = []
    tail = stored
    if stored and _is_marker(stored[0], _PREFIX):
        marker, tail = stored[0], stored[1:]
        src, n = marker.get(_PREFIX), marker.get("n")
        if src is not None:
            base = trajectory if src == _TRAJECTORY else (earlier[src] if type(src) is int and 0 <= src < k else None)
            if base is None or type(n) is not int or not 0 <= n <= len(base):
                raise CompactError(f"call {k} starts with {n!r} messages of {src!r}, which does not have them")
            head = base[:n]
    if tx is not None:
        tail = [tx.message(m) for m in tail]
    return head + tail if head else list(tail)


def _expand_tokens(ids: list[Any], k: int, calls: list[Any]) -> list[int]:
    marker = ids[0]
    src, n = marker.get(_PREFIX), marker.get("n")
    prev = calls[src] if type(src) is int and 0 <= src < k else None
    p_prev = prev.get("prompt_token_ids") if isinstance(prev, Mapping) else None
    if not isinstance(p_prev, list):
        raise CompactError(f"call {k}'s prompt token ids extend call {src!r}'s, which has none")
    g_prev = prev.get("generation_token_ids") if isinstance(prev, Mapping) else None
    base = p_prev + g_prev if isinstance(g_prev, list) else p_prev
    if type(n) is not int or not 0 <= n <= len(base):
        raise CompactError(f"call {k}'s prompt token ids extend {n!r} ids of call {src}, which has {len(base)}")
    return base[:n] + ids[1:]


def _expand_response(response: Any, tx: _TextExpander) -> Any:
    if not isinstance(response, Mapping) or not isinstance(response.get("choices"), list):
        return response
    return {**response, "choices": [{**c, "message": tx.message(c["message"])}
                                    if isinstance(c, Mapping) and isinstance(c.get("message"), Mapping) else c
                                    for c in response["choices"]]}


def expand_records(records: Iterable[Mapping[str, Any]], tasks: TaskLookup | None, *, strict: bool = True,
                   problems: list[str] | None = None) -> list[dict[str, Any]]:
    """``expand_record`` over a journal; with ``problems`` given, a record that cannot be expanded is
    left out and described there instead of raising."""
    out: list[dict[str, Any]] = []
    for i, rec in enumerate(records):
        try:
            out.append(expand_record(rec, tasks, strict=strict))
        except CompactError as exc:
            if problems is None:
                raise
            problems.append(f"record {i + 1} ({rec.get('rollout_id', '?')}): {exc}")
    return out


# ---- the run's tasks --------------------------------------------------------------------------------

class RunTasks:
    """The tasks of a run's ``tasks.jsonl`` by id, read on demand: the file is indexed (offsets only)
    on first use and a task's row is parsed when a record references it, so a viewer of a run with
    huge prompts never holds them all. ``get`` gives a task's input texts (what expansion needs), and
    the last few are kept; thread-safe."""

    def __init__(self, path: str | os.PathLike[str], *, cache: int = 8) -> None:
        self.path = Path(path)
        self._index: dict[str, tuple[int, int]] | None = None
        self._rows: OrderedDict[str, _Texts] = OrderedDict()
        self._cache = cache
        self._lock = threading.Lock()

    def _build(self) -> dict[str, tuple[int, int]]:
        index: dict[str, tuple[int, int]] = {}
        if not self.path.is_file():
            return index
        offset = 0
        with self.path.open("rb") as fh:
            for line in fh:
                if line.strip():
                    try:
                        row = orjson.loads(line)
                    except orjson.JSONDecodeError:
                        row = None
                    if isinstance(row, dict) and "id" in row:
                        index.setdefault(str(row["id"]), (offset, len(line)))
                offset += len(line)
        return index

    def get(self, key: str, /) -> _Texts | None:
        """The input texts of task ``key`` (what expansion needs), or None when the file lacks it."""
        with self._lock:
            hit = self._rows.get(key)
            if hit is not None:
                self._rows.move_to_end(key)
                return hit
            if self._index is None:
                self._index = self._build()
            span = self._index.get(key)
            if span is None:
                return None
            with self.path.open("rb") as fh:
                row = orjson.loads(os.pread(fh.fileno(), span[1], span[0]))
            texts = _Texts(self, _input_texts(row.get("input", "")))
            self._rows[key] = texts
            while len(self._rows) > self._cache:
                self._rows.popitem(last=False)
            return texts


def read_expanded(journal: str | os.PathLike[str], tasks: TaskLookup | None = None, *,
                  missing_ok: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """Every whole record of a journal, expanded against the run's ``tasks.jsonl`` (beside the journal,
    unless ``tasks`` is given), plus the problems met: dropped lines and records that cannot expand."""
    from palaestra.rollout.journal_read import read_journal
    from palaestra.rollout.rundir import TASKS

    records, problems = read_journal(journal, missing_ok=missing_ok)
    lookup = tasks if tasks is not None else RunTasks(Path(journal).parent / TASKS)
    return expand_records(records, lookup, problems=problems), problems
