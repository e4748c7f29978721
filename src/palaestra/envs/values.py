"""Typed equality of JSON values, as verifiers that grade extracted values (json_schema, tool_call) need it.

Numbers compare numerically (``2 == 2.0``) but a boolean is never a number; lists compare in order and
objects key by key; strings exactly, or through ``fold`` when the task asks for lenient strings. Each
verifier decides how lenient ``fold`` is, and whether an ``{one_of: [...]}`` object accepts alternatives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["typed_equal"]


def typed_equal(expected: Any, got: Any, *, fold: Callable[[str], str] | None = None,
                one_of: str | None = None) -> bool:
    """Whether ``got`` is the value ``expected`` (see the module docstring for the rules)."""
    def eq(e: Any, g: Any) -> bool:
        return typed_equal(e, g, fold=fold, one_of=one_of)

    if one_of is not None and isinstance(expected, dict) and set(expected) == {one_of}:
        return any(eq(option, got) for option in expected[one_of])
    if isinstance(expected, bool) or isinstance(got, bool):
        return isinstance(expected, bool) and isinstance(got, bool) and expected == got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return abs(float(expected) - float(got)) <= 1e-9 * max(1.0, abs(float(expected)))
    if isinstance(expected, str) and isinstance(got, str):
        return fold(expected) == fold(got) if fold is not None else expected == got
    if isinstance(expected, list) and isinstance(got, list):
        return len(expected) == len(got) and all(eq(e, g) for e, g in zip(expected, got, strict=True))
    if isinstance(expected, dict) and isinstance(got, dict):
        return expected.keys() == got.keys() and all(eq(v, got[k]) for k, v in expected.items())
    return expected is None and got is None
