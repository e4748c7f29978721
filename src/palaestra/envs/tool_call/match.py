"""Comparing a model's tool calls with the expected ones: by name and by typed arguments.

Parallel calls have no order, so the comparison is a maximum matching between expected and actual
calls (every expected call may be satisfied by any one actual call). An expected argument value may
be ``{"$one_of": [v1, v2, ...]}`` when several values are right (``"NYC"`` or ``"New York"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ONE_OF = "$one_of"


@dataclass(frozen=True)
class Call:
    """A tool call; ``arguments`` is None when the model's arguments were not a JSON object."""

    name: str
    arguments: dict[str, Any] | None


def same_value(expected: Any, got: Any, normalize_strings: bool) -> bool:
    """Typed equality: numbers numerically (2 == 2.0; booleans are not numbers), strings exactly or
    after strip+casefold when ``normalize_strings``, lists in order, objects key by key."""
    if isinstance(expected, dict) and set(expected) == {ONE_OF}:
        return any(same_value(option, got, normalize_strings) for option in expected[ONE_OF])
    if isinstance(expected, bool) or isinstance(got, bool):
        return isinstance(expected, bool) and isinstance(got, bool) and expected == got
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return abs(float(expected) - float(got)) <= 1e-9 * max(1.0, abs(float(expected)))
    if isinstance(expected, str) and isinstance(got, str):
        if normalize_strings:
            return " ".join(expected.split()).casefold() == " ".join(got.split()).casefold()
        return expected == got
    if isinstance(expected, list) and isinstance(got, list):
        return len(expected) == len(got) and all(
            same_value(e, g, normalize_strings) for e, g in zip(expected, got, strict=True))
    if isinstance(expected, dict) and isinstance(got, dict):
        return expected.keys() == got.keys() and all(
            same_value(v, got[k], normalize_strings) for k, v in expected.items())
    return expected is None and got is None


def argument_problems(expected: Call, got: Call, defaults: dict[str, Any], normalize_strings: bool,
                      allow_extra: bool) -> list[str]:
    """Why ``got`` is not ``expected`` (empty when it is). An argument the model adds is fine when it
    equals the parameter's schema default, or when ``allow_extra`` is set."""
    if expected.name != got.name:
        return [f"name {got.name!r} is not {expected.name!r}"]
    if got.arguments is None:
        return ["arguments are not a JSON object"]
    problems = []
    for key, want in (expected.arguments or {}).items():
        if key not in got.arguments:
            problems.append(f"missing argument {key!r}")
        elif not same_value(want, got.arguments[key], normalize_strings):
            problems.append(f"{key}={got.arguments[key]!r}, expected {want!r}")
    for key in got.arguments.keys() - (expected.arguments or {}).keys():
        if allow_extra:
            continue
        if key in defaults and same_value(defaults[key], got.arguments[key], normalize_strings):
            continue
        problems.append(f"unexpected argument {key}={got.arguments[key]!r}")
    return problems


def max_matching(ok: list[list[bool]]) -> list[int]:
    """Maximum bipartite matching (Kuhn's augmenting paths): ``result[j]`` is the expected call matched
    to actual call ``j``, or -1. Call lists are short, so the simple algorithm is plenty."""
    n_actual = len(ok[0]) if ok else 0
    owner = [-1] * n_actual

    def augment(i: int, seen: list[bool]) -> bool:
        for j in range(n_actual):
            if ok[i][j] and not seen[j]:
                seen[j] = True
                if owner[j] == -1 or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(ok)):
        augment(i, [False] * n_actual)
    return owner
