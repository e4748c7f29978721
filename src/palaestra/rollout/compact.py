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

import logging
from typing import Any

from palaestra.core.records import Rollout, Task
from palaestra.rollout.compact_format import (
    _LITERAL,
    _PREFIX,
    _SAME,
    _TASK_TEXT,
    _TRAJECTORY,
    FORMAT,
    MIN_TEXT,
    CompactError,
    TaskLookup,
    _is_marker,
    _Texts,
    map_message_text,
    task_texts,
)
from palaestra.rollout.expand import RunTasks, expand_record, expand_records, is_compact, read_expanded
from palaestra.rollout.plain import plain_data, plain_line

__all__ = ["MIN_TEXT", "CompactError", "RunTasks", "TaskLookup", "compact_record", "compact_rollout",
           "expand_record", "expand_records", "is_compact", "journal_forms", "read_expanded", "task_texts"]

log = logging.getLogger(__name__)

MIN_TOKEN_PREFIX = 16  # a shorter shared run of token ids is stored as it is


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
        return map_message_text(m, self.text)

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
    # A prompt string shorter than MIN_TEXT has no text worth referencing: no lookup of its texts at all
    texts = task_texts(task) if task is not None and not (type(task.input) is str and len(task.input) < MIN_TEXT) \
        else None
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
    """The journal form of a Rollout: dumped in JSON mode (``rollout.plain``: without pydantic's walk when
    the record is plain data, the same JSON either way) and compacted. Never loses a record: should
    compaction fail on an odd record, the record is journaled whole (and the failure logged)."""
    return journal_forms(rollout, task)[0]


def journal_forms(rollout: Any, task: Task | None = None) -> tuple[Any, dict[str, Any] | None, bytes | None]:
    """``compact_rollout``'s journal form; the record in full as JSON data: what ``expand_record`` of the
    journal line gives back, had without expanding (the end of a run encodes report transcripts from it);
    and the journal line of the compact form when it is already encoded (None: the journal encodes it).
    The full form shares values with the Rollout and the journal form: for reading, not keeping."""
    fast = plain_data(rollout) if type(rollout) is Rollout else None  # no pydantic walk (rollout/plain.py)
    if fast is not None:
        try:
            compacted = compact_record(_shell(fast), task, source=rollout)
        except Exception:  # whatever it was, pydantic's dump below settles it
            compacted = None
        # checked compacted (a fraction of the bytes), and the check's encoding is the journal line
        line = plain_line(compacted) if compacted is not None else None
        if line is not None:
            return compacted, fast, line
    data: dict[str, Any] = rollout.model_dump(mode="json", exclude_none=False)
    try:
        return compact_record(_shell(data), task, source=rollout), data, None
    except Exception:  # pragma: no cover - a bug here must cost bytes, never a record
        log.exception("could not compact rollout %s; journaling it whole", getattr(rollout, "rollout_id", "?"))
        return rollout, data, None


def _shell(rec: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``rec`` and its trajectory, the two dicts ``compact_record`` writes into: compacting the
    copy leaves ``rec`` whole."""
    traj = rec.get("trajectory")
    return {**rec, "trajectory": dict(traj)} if type(traj) is dict else dict(rec)


# ---- expansion -------------------------------------------------------------------------------------
