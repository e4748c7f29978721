"""A Rollout as plain JSON data, without pydantic's serializer: the journal's hot path.

``Rollout.model_dump(mode="json")`` walks every value of the record's free-form fields (each model call's
request and response, the messages, tool outputs) and infers a JSON form for each, in a fresh copy. Those
values are plain JSON data already (decoded from a model's answer, built by an agent from dicts and
lists), so the walk copies them for nothing: for a multi-turn rollout of five model calls (45 KB) it cost
~330 µs, about 7 % of the whole rollout's CPU. ``plain_data`` builds the same dict with one new dict per
record object (fields in declaration order, then extra fields, as pydantic does) and the free-form
values passed by reference; ``plain_line`` then checks with orjson that they are JSON data (the journal
checks the compacted record, a fraction of the bytes). Anything it cannot vouch for (a record class it
does not know, a pydantic model, datetime or dataclass inside a free-form value, a non-string key, a
set) fails the check, and the caller dumps with pydantic as before: the journal line is the same bytes either way.

The result shares the rollout's free-form values: it is for encoding, and for keeping only as the record
of a finished rollout (a journal that keeps what it appends, ``rollout.journal.Written``): compaction
copies what it changes and never writes into them, and nothing writes into a finished rollout."""

from __future__ import annotations

import types
from collections.abc import Callable
from operator import itemgetter
from typing import Any, Union, get_args, get_origin

import orjson
from pydantic import BaseModel

from palaestra.core.records import (
    ModelCallRecord,
    Outcome,
    Rollout,
    ToolCallRecord,
    Trajectory,
    Usage,
    Verdict,
)

__all__ = ["plain_data", "plain_line", "rollout_data"]

_CLASSES = (Rollout, Outcome, Verdict, Trajectory, ToolCallRecord, ModelCallRecord, Usage)


def _direct(annotation: Any) -> bool:
    """Whether a field of this type can hold a record object, or a list of them, as its very value (what
    ``_value`` converts): a record class, ``Any``, or a list or union of such."""
    if annotation is Any or annotation is object or annotation in _CLASSES:
        return True
    if get_origin(annotation) in (list, Union, types.UnionType):
        return any(_direct(a) for a in get_args(annotation))
    return False


def _plan(cls: type[BaseModel]) -> tuple[tuple[str, ...], Callable[[dict[str, Any]], tuple[Any, ...]], tuple[str, ...]]:
    """A record class's field names in declaration order (pydantic's dump order), a getter of their values
    from an instance's ``__dict__`` (all at once, in C), and the fields ``_value`` must look into."""
    names = tuple(cls.model_fields)
    if len(names) < 2:  # itemgetter of one name returns the value, not a tuple of it
        raise TypeError(f"{cls.__name__}: rollout.plain expects records of two fields or more")
    return names, itemgetter(*names), tuple(n for n, f in cls.model_fields.items() if _direct(f.annotation))


# Each record class of a Rollout, planned once.
_PLANS = {cls: _plan(cls) for cls in _CLASSES}
# A datetime or dataclass inside a free-form value: orjson would write it its own way, pydantic its own.
_CHECK = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


class _NotPlain(Exception):
    """A value this module does not vouch for: the caller falls back to pydantic's dump."""


def _refuse(value: Any) -> Any:
    raise _NotPlain(type(value).__name__)


def _record(obj: Any) -> dict[str, Any]:
    """One record object as a new dict. Exact classes only: pydantic dumps a subclass by its declared type,
    so one here (or any other model) is left in place, for orjson's check to refuse. Only the fields whose
    type can hold a record are looked into; the others are plain data or fail the check."""
    names, values_of, nested = _PLANS[type(obj)]
    out = dict(zip(names, values_of(obj.__dict__)))
    for name in nested:
        out[name] = _value(out[name])
    extra = obj.__pydantic_extra__
    if extra:
        for key, value in extra.items():
            out[key] = _value(value)
    return out


def _value(value: Any) -> Any:
    kind = type(value)
    if kind in _PLANS:
        return _record(value)
    if kind is list and value and type(value[0]) in _PLANS:  # tool_calls, model_calls
        return [_record(v) if type(v) in _PLANS else v for v in value]
    return value


def plain_data(rollout: Rollout) -> dict[str, Any] | None:
    """``rollout.model_dump(mode="json")``'s fields as a dict sharing the rollout's free-form values, not
    yet checked (``plain_line`` checks it, after compaction has made it smaller); None for a Rollout subclass."""
    if type(rollout) is not Rollout:
        return None
    try:
        return _record(rollout)
    except KeyError:  # a field without a value (built by model_construct): let pydantic say what it makes of it
        return None


def plain_line(data: Any) -> bytes | None:
    """``data``'s journal line (``rollout.journal.encode_record``'s very bytes) if orjson writes it as
    pydantic's JSON mode would, plain JSON types only; None if not. The check is the encoding: the line is
    not encoded a second time by the journal."""
    try:
        line = orjson.dumps(data, default=_refuse, option=_CHECK | orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # orjson.JSONEncodeError is a TypeError; _NotPlain comes wrapped in it
        return None
    return memoryview(line).tobytes()  # right-sized, as the journal's own encoding is (journal._encode)


def rollout_data(rollout: Rollout) -> dict[str, Any] | None:
    """``rollout.model_dump(mode="json")``'s JSON, as a dict sharing the rollout's free-form values; None
    when the rollout holds anything but plain JSON data there (then dump it with pydantic)."""
    data = plain_data(rollout)
    return data if data is not None and plain_line(data) is not None else None
