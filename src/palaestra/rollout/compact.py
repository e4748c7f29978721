"""Compact journal records: a task is stored once per run (``tasks.jsonl``), never copied into records.

Left alone, one rollout's record holds its task's prompt several times over: in
``trajectory.messages`` and again in every model call's request, because a chat request repeats the
whole conversation so far (a 50 MB prompt made a 100 MB record, and a 16-turn tool rollout holds
sixteen copies of its opening). On its way into the journal a record is compacted, losslessly:

- a model call's request messages that begin with the trajectory's messages (or the previous call's)
  store ``{"$prefix": SOURCE, "n": N}`` in place of those N messages, SOURCE being ``"trajectory"``
  or the index of an earlier call of the same record; only the new messages follow it;
- a message text (``content``, or a content part's ``text``) that contains a long text of the task's
  input stores ``{"$task_text": I, "n": L, "pre": P, "post": Q}``: P + the first L characters of the
  task's I-th input text + Q (L is shorter than the text when an environment stripped its trailing
  space). ``compact.task`` names the task and a digest of its texts, checked when expanding;
- a call's ``tools`` equal to the previous call's store ``{"$same": K}``;
- a call's ``prompt_token_ids`` that begin with call K's prompt ids followed by its generated ids
  store ``[{"$prefix": K, "n": N}, *new ids]`` (token ids are kept exactly, never dropped).

A compacted record carries a top-level ``compact`` object; records without it (every record written
before schema 2) are complete as they are. ``expand_record`` is the one inverse, and every reader that
needs full requests (report, training exports, reverify, metrics) calls it. A literal value that looks
like a marker is wrapped as ``{"$literal": value}`` so the round trip stays exact.

Writing costs little: prefixes are found by walking messages once per call, and task texts are only
searched for when the task has a text of at least ``MIN_TEXT`` characters.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from palaestra.core.errors import PalaestraError
from palaestra.core.records import Task

__all__ = ["MIN_TEXT", "CompactError", "RunTasks", "TaskLookup", "compact_record", "compact_rollout",
           "expand_record", "expand_records", "is_compact", "read_expanded", "task_texts"]

log = logging.getLogger(__name__)

FORMAT = 1
MIN_TEXT = 256  # a shorter text costs less to store again than to reference
MIN_TOKEN_PREFIX = 16  # a shorter shared run of token ids is stored as it is

_PREFIX, _TASK_TEXT, _SAME, _LITERAL = "$prefix", "$task_text", "$same", "$literal"
_TRAJECTORY = "trajectory"


class CompactError(PalaestraError):
    """A compacted record cannot be expanded (its task is missing from tasks.jsonl, or differs)."""

    kind = "journal"


class TaskLookup(Protocol):
    """Where expansion finds a record's task: a dict of tasks by id, or a ``RunTasks``."""

    def get(self, key: str, /) -> Any: ...


# ---- task texts ------------------------------------------------------------------------------------

def _input_texts(value: Any) -> list[str]:
    """The texts of a task input (a prompt string, or the message contents and content-part texts), in
    order; the index of a text in this list is what a ``$task_text`` marker names."""
    if isinstance(value, str):
        return [value]
    out: list[str] = []
    if isinstance(value, list):
        for m in value:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return out


def _digest(texts: list[str]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for s in texts:
        b = s.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


class _Texts:
    """A task's input texts, the long ones (longest first: the most worth referencing) and their digest,
    computed once per task object however many records reference it."""

    __slots__ = ("_digest", "long", "owner", "texts")

    def __init__(self, owner: object, texts: list[str]) -> None:
        self.owner = owner  # held, so the id() it is cached under cannot be reused while cached
        self.texts = texts
        self.long = sorted(((i, s) for i, s in enumerate(texts) if len(s) >= MIN_TEXT), key=lambda p: -len(p[1]))
        self._digest: str | None = None

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = _digest(self.texts)
        return self._digest

    def ref(self, text: str) -> dict[str, Any] | None:
        """The ``$task_text`` marker for ``text`` when it contains one of the long task texts."""
        for i, s in self.long:
            if len(s) > len(text):
                continue
            pos = text.find(s)
            n = len(s)
            if pos < 0:
                stripped = s.rstrip()  # environments often append to ``content.rstrip()``
                if len(stripped) == n or len(stripped) < MIN_TEXT:
                    continue
                pos, n = text.find(stripped), len(stripped)
                if pos < 0:
                    continue
            return {_TASK_TEXT: i, "n": n, "pre": text[:pos], "post": text[pos + n:]}
        return None


_CACHE: OrderedDict[int, _Texts] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 64


def task_texts(task: Task) -> _Texts:
    """The (cached) texts of ``task``'s input."""
    key = id(task)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit.owner is task:
            _CACHE.move_to_end(key)
            return hit
    made = _Texts(task, _input_texts(task.input))
    with _CACHE_LOCK:
        _CACHE[key] = made
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return made


# ---- compaction ------------------------------------------------------------------------------------

def _same(a: Any, b: Any) -> bool:
    """JSON equality that also keeps types and key order (``1 == 1.0 == True`` in Python, not in JSON).
    ``==`` runs first, in C, and rules out almost every difference; the walk then only checks types."""
    return a is b or (a == b and _types_match(a, b))


def _types_match(a: Any, b: Any) -> bool:
    t = type(a)
    if t is not type(b):
        return False
    if t is dict:
        if list(a) != list(b):
            return False
        for va, vb in zip(a.values(), b.values()):
            tv = type(va)
            if tv is str:
                continue  # equal to vb already, so a string too
            if tv is not type(vb) or ((tv is dict or tv is list) and not _types_match(va, vb)):
                return False
        return True
    if t is list:
        for va, vb in zip(a, b):
            tv = type(va)
            if tv is not str and (tv is not type(vb) or ((tv is dict or tv is list) and not _types_match(va, vb))):
                return False
    return True


def _common_prefix(a: list[Any], b: list[Any], start: int = 0,
                   raw_a: list[Any] | None = None, raw_b: list[Any] | None = None) -> int:
    """Length of the shared leading run of two message lists (from ``start``, known to be shared). Where
    the in-memory lists they were dumped from hold the very same object, no comparing is needed."""
    n, i = min(len(a), len(b)), start
    same_objects = raw_a is not None and raw_b is not None and len(raw_a) == len(a) and len(raw_b) == len(b)
    while i < n and ((same_objects and raw_a[i] is raw_b[i]) or _same(a[i], b[i])):  # type: ignore[index]
        i += 1
    return i


def _identical_prefix(a: list[Any] | None, b: list[Any] | None, limit: int) -> int:
    """How many leading elements two lists share as the very same objects (free to find: an agent sends
    each turn's messages as the same dicts it sent the turn before)."""
    if a is None or b is None:
        return 0
    n, i = min(len(a), len(b), limit), 0
    while i < n and a[i] is b[i]:
        i += 1
    return i


def _common_int_prefix(a: list[Any], b: list[Any]) -> int:
    """Length of the shared leading run of two id lists (slice comparisons run in C)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _is_marker(value: Any, *keys: str) -> bool:
    return type(value) is dict and any(k in value for k in keys)


class _TextRefs:
    """Applies ``$task_text`` markers to message texts; ``made`` counts markers and escapes made."""

    def __init__(self, texts: _Texts) -> None:
        self.texts = texts
        self.made = 0

    def text(self, value: Any) -> Any:
        if type(value) is str:
            if len(value) >= MIN_TEXT:
                ref = self.texts.ref(value)
                if ref is not None:
                    self.made += 1
                    return ref
            return value
        if _is_marker(value, _LITERAL, _TASK_TEXT):  # a literal a reader would take for a marker
            self.made += 1
            return {_LITERAL: value}
        return value

    def message(self, m: Any) -> Any:
        if type(m) is not dict or "content" not in m:
            return m
        content = m["content"]
        if type(content) is list:
            parts = [{**p, "text": self.text(p["text"])} if type(p) is dict and "text" in p else p
                     for p in content]
            new: Any = parts if any(x is not y for x, y in zip(parts, content)) else content
        else:
            new = self.text(content)
        return m if new is content else {**m, "content": new}

    def messages(self, ms: list[Any]) -> list[Any]:
        return [self.message(m) for m in ms]


def compact_record(rec: dict[str, Any], task: Task | None = None, *, source: Any = None) -> dict[str, Any]:
    """Compact a journal record (a Rollout dumped in JSON mode) in place and return it.

    ``task`` is the rollout's task: texts of its input are then referenced instead of stored. Without
    it only repeats inside the record are removed. ``source`` is the Rollout ``rec`` was dumped from:
    its in-memory requests tell, by object identity, which messages a call repeats from the call before,
    so those need no comparing. A record with nothing to compact is left unchanged.
    """
    traj = rec.get("trajectory")
    if type(traj) is not dict:
        return rec
    messages = traj.get("messages")
    messages = messages if type(messages) is list else []
    calls = traj.get("model_calls")
    calls = calls if type(calls) is list else []
    raw: list[dict[str, Any] | None] = [None] * len(calls)  # the in-memory requests, for identity checks
    raw_messages: list[Any] | None = None
    if source is not None:
        src_calls = source.trajectory.model_calls
        if len(src_calls) == len(calls):
            raw = [c.request for c in src_calls]
            raw_messages = source.trajectory.messages
    texts = task_texts(task) if task is not None else None
    refs = _TextRefs(texts) if texts is not None and texts.long else None
    changed = False
    new_messages = refs.messages(messages) if refs is not None and messages else messages
    sent_lists: list[list[Any] | None] = []  # each call's messages as sent: what later calls are compared to
    covered: list[int] = []  # how many leading messages of each call equal the trajectory's
    new_calls: list[Any] = []
    best_src: str | int | None
    for k, call in enumerate(calls):
        request = call.get("request") if type(call) is dict else None
        if type(request) is not dict:
            sent_lists.append(None)
            covered.append(0)
            new_calls.append(call)
            continue
        request = dict(request)
        call = {**call, "request": request}
        sent = request.get("messages")
        sent = sent if type(sent) is list else None
        raw_req, raw_prev = raw[k], raw[k - 1] if k > 0 else None
        raw_sent = raw_req.get("messages") if raw_req is not None else None
        raw_prev_sent = raw_prev.get("messages") if raw_prev is not None else None
        sent_lists.append(sent)
        n_traj = 0
        if sent is not None:
            # what the call before shared with the trajectory, this call shares too where it resent the
            # very same messages: only the rest needs comparing
            known = _identical_prefix(raw_sent, raw_prev_sent, covered[k - 1]) if k > 0 else 0
            n_traj = _common_prefix(sent, messages, known, raw_sent, raw_messages) if messages else 0
            best_n, best_src = n_traj, _TRAJECTORY
            prev = sent_lists[k - 1] if k > 0 else None
            if prev and best_n < len(sent) and best_n < len(prev):
                n = _identical_prefix(raw_sent, raw_prev_sent, len(prev))
                n = _common_prefix(sent, prev, n)
                if n > best_n:
                    best_n, best_src = n, k - 1
            tail = sent[best_n:] if best_n else sent
            if refs is not None:
                tail = refs.messages(tail)
            if best_n:
                request["messages"] = [{_PREFIX: best_src, "n": best_n}, *tail]
                changed = True
            elif tail and _is_marker(tail[0], _PREFIX):  # a literal first message that reads as a marker
                request["messages"] = [{_PREFIX: None, "n": 0}, *tail]
                changed = True
            elif tail is not sent:
                request["messages"] = tail
        covered.append(n_traj)
        if "tools" in request:
            tools = request["tools"]
            prev_request = calls[k - 1].get("request") if k > 0 and type(calls[k - 1]) is dict else None
            if (type(prev_request) is dict and "tools" in prev_request and tools is not None
                    and ((raw_req is not None and raw_prev is not None
                          and raw_req.get("tools") is raw_prev.get("tools"))
                         or _same(tools, prev_request["tools"]))):
                request["tools"] = {_SAME: k - 1}
                changed = True
            elif _is_marker(tools, _SAME, _LITERAL):
                request["tools"] = {_LITERAL: tools}
                changed = True
        if k > 0 and _compact_tokens(call, calls[k - 1], k - 1):
            changed = True
        if refs is not None:
            call["response"] = _response_refs(call.get("response"), refs)
        new_calls.append(call)
    if refs is not None and refs.made:
        assert texts is not None and task is not None
        traj["messages"], traj["model_calls"] = new_messages, new_calls
        rec["compact"] = {"v": FORMAT, "task": {"id": task.id, "texts": len(texts.texts), "digest": texts.digest}}
    elif changed:  # without task texts the text pass changed nothing: the calls hold no escapes either
        traj["model_calls"] = new_calls
        rec["compact"] = {"v": FORMAT}
    return rec


def _compact_tokens(call: dict[str, Any], prev: Any, src: int) -> bool:
    ids = call.get("prompt_token_ids")
    if type(ids) is not list or type(prev) is not dict:
        return False
    p_prev, g_prev = prev.get("prompt_token_ids"), prev.get("generation_token_ids")
    if type(p_prev) is not list:
        return False
    base = p_prev + g_prev if type(g_prev) is list else p_prev
    n = _common_int_prefix(ids, base)
    if n < MIN_TOKEN_PREFIX:
        return False
    call["prompt_token_ids"] = [{_PREFIX: src, "n": n}, *ids[n:]]
    return True


def _response_refs(response: Any, refs: _TextRefs) -> Any:
    """A response whose choices' messages quote the task (an echoing model) references it too."""
    if type(response) is not dict or type(response.get("choices")) is not list:
        return response
    choices = [{**c, "message": refs.message(c["message"])} if type(c) is dict and type(c.get("message")) is dict
               else c for c in response["choices"]]
    if all(type(c) is not dict or c.get("message") is o.get("message")
           for c, o in zip(choices, response["choices"]) if type(o) is dict):
        return response
    return {**response, "choices": choices}


def compact_rollout(rollout: Any, task: Task | None = None) -> Any:
    """The journal form of a Rollout: dumped in JSON mode and compacted. Never loses a record: should
    compaction fail on an odd record, the record is journaled whole (and the failure logged)."""
    data: dict[str, Any] = rollout.model_dump(mode="json", exclude_none=False)
    try:
        return compact_record(data, task, source=rollout)
    except Exception:  # pragma: no cover - a bug here must cost bytes, never a record
        log.exception("could not compact rollout %s; journaling it whole", getattr(rollout, "rollout_id", "?"))
        return rollout


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
        if type(m) is not dict or "content" not in m:
            return m
        content = m["content"]
        if type(content) is list:
            new: Any = [{**p, "text": self.text(p["text"])} if type(p) is dict and "text" in p else p
                        for p in content]
        else:
            new = self.text(content)
            if new is content:
                return m
        return {**m, "content": new}


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
    from palaestra.rollout.journal import read_journal
    from palaestra.rollout.rundir import TASKS

    records, problems = read_journal(journal, missing_ok=missing_ok)
    lookup = tasks if tasks is not None else RunTasks(Path(journal).parent / TASKS)
    return expand_records(records, lookup, problems=problems), problems
