"""Comparing a model's tool calls with the expected ones: by name and by typed arguments.

Parallel calls have no order, so the comparison is a maximum matching between expected and actual
calls (every expected call may be satisfied by any one actual call). An expected argument value may
be ``{"$one_of": [v1, v2, ...]}`` when several values are right (``"NYC"`` or ``"New York"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from palaestra.envs.values import typed_equal

ONE_OF = "$one_of"


@dataclass(frozen=True)
class Call:
    """A tool call; ``arguments`` is None when the model's arguments were not a JSON object."""

    name: str
    arguments: dict[str, Any] | None


def _space_fold(text: str) -> str:
    return " ".join(text.split()).casefold()


def same_value(expected: Any, got: Any, normalize_strings: bool) -> bool:
    """Typed equality (``envs.values``) where ``{"one_of": [...]}`` accepts any listed value; strings
    exactly, or with whitespace runs collapsed and case folded when ``normalize_strings``."""
    return typed_equal(expected, got, fold=_space_fold if normalize_strings else None, one_of=ONE_OF)


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
