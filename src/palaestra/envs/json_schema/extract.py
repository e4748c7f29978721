"""Finding the JSON a model meant as its answer, and reading values out of it by path.

Models wrap JSON in prose or in a fenced block, so extraction takes, in order: the whole reply, else
the last fenced block holding JSON (```json, or a bare ``` fence opening with ``{`` or ``[``), else the
last balanced ``{...}`` that looks like a JSON object (``{"`` or ``{}``). That one is the committed
answer: when it does not parse, the reply's answer is broken JSON (``invalid_json``), and an earlier
draft or example in the reply is never graded in its place.
"""

from __future__ import annotations

import json
import re
from typing import Any

from palaestra.envs.values import typed_equal

_MISSING = object()


def _balanced_objects(text: str) -> list[str]:
    """Every top-level ``{...}`` span with balanced braces (string contents respected)."""
    spans: list[str] = []
    depth, start, in_str, escape = 0, -1, False, False
    for i, ch in enumerate(text):
        if in_str:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth > 0:
            in_str = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


_FENCE_TAGGED = re.compile(r"```[ \t]*(json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
_OBJECT_START = re.compile(r"\{\s*(?:\"|\})")


def extract_json(text: str) -> tuple[Any, str | None, str | None]:
    """``(value, found_by, reason)``: the committed JSON answer and where it was (``whole``, ``fenced``,
    ``embedded``), or ``(None, None, reason)`` with reason ``no_json_found`` or ``invalid_json`` (the
    committed block or object does not parse)."""
    stripped = text.strip()
    if not stripped:
        return None, None, "no_json_found"
    try:
        return json.loads(stripped), "whole", None
    except ValueError:
        pass
    fenced = [body.strip() for tag, body in _FENCE_TAGGED.findall(text)
              if tag or body.lstrip().startswith(("{", "["))]
    if fenced:
        try:
            return json.loads(fenced[-1]), "fenced", None
        except ValueError:
            return None, None, "invalid_json"
    spans = [span for span in _balanced_objects(text) if _OBJECT_START.match(span)]
    if spans:
        try:
            return json.loads(spans[-1]), "embedded", None
        except ValueError:
            return None, None, "invalid_json"
    return None, None, "no_json_found"


def find_json(text: str) -> tuple[Any, str | None]:
    """The answer's JSON value and how it was found, or ``(None, None)`` when there is none."""
    value, found_by, _ = extract_json(text)
    return value, found_by


_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def split_path(path: str) -> list[str | int]:
    """``a.b[0].c`` or JSON Pointer ``/a/b/0/c`` → keys and indexes. ValueError for an empty path."""
    if path.startswith("/"):
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]
        return [int(p) if p.isdigit() else p for p in parts]
    steps: list[str | int] = []
    for m in _STEP.finditer(path):
        steps.append(int(m.group(2)) if m.group(2) is not None else m.group(1))
    if not steps:
        raise ValueError(f"empty path {path!r}")
    return steps


def lookup(value: Any, path: str) -> Any:
    """The value at ``path``, or the module's ``MISSING`` sentinel (see ``is_missing``)."""
    current = value
    for step in split_path(path):
        if isinstance(step, int) and isinstance(current, list):
            if step >= len(current):
                return _MISSING
            current = current[step]
        elif isinstance(current, dict) and str(step) in current:
            current = current[str(step)]
        else:
            return _MISSING
    return current


def is_missing(value: Any) -> bool:
    return value is _MISSING


def _strip_fold(text: str) -> str:
    return text.strip().casefold()


def same(expected: Any, got: Any, *, normalize_strings: bool = False) -> bool:
    """Typed equality (``envs.values``): strings exactly or (when asked) after strip and casefold."""
    return typed_equal(expected, got, fold=_strip_fold if normalize_strings else None)
