"""The compact journal format's shared parts: its markers, the task texts that records reference, and the
error a record that cannot be expanded raises. The format is described in ``rollout/compact.py``; the
writer is there and the reader in ``rollout/expand.py``, both built on this module."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from palaestra.core.errors import PalaestraError
from palaestra.core.records import Task

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


def _is_marker(value: Any, *keys: str) -> bool:
    return type(value) is dict and any(k in value for k in keys)


def map_message_text(m: Any, text: Callable[[Any], Any]) -> Any:
    """``m`` with ``text`` applied to its content: the content itself, or the ``text`` of each content
    part. The writer (``compact.py``) and the reader (``expand.py``) walk a message the same way through
    this one function, so what one replaces the other finds. ``m`` itself when nothing changed."""
    if type(m) is not dict or "content" not in m:
        return m
    content = m["content"]
    if type(content) is list:
        parts = [{**p, "text": text(p["text"])} if type(p) is dict and "text" in p else p for p in content]
        new: Any = parts if any(x is not y for x, y in zip(parts, content)) else content
    else:
        new = text(content)
    return m if new is content else {**m, "content": new}

