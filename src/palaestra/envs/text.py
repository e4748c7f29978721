"""Reading ``\\boxed{}`` answers out of a model reply, shared by the verifiers that grade boxed answers
(maths, multiple choice), so both read a box by the same rule and a fix to one reaches the other.

Two rules live here: every balanced box in the reply (what palaestra's own extractors read), and the box
the last literal ``\\boxed{`` opens (the NeMo Gym rule the compat modes reproduce, where an earlier
complete box does not count when a later one never closes).
"""

from __future__ import annotations

import re

__all__ = ["boxes", "has_box_opener", "last_open_box"]

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")


def boxes(text: str) -> list[tuple[int, int, str]]:
    """Every balanced ``\\boxed{...}`` / ``\\fbox{...}`` as (start, end, content), in order of position.

    One pass with a stack of open braces, so a reply full of unclosed boxes costs linear time, not
    quadratic (replies are model output: hostile input for a verifier). The pass visits the braces only,
    from the first box on (a regex finds them): a long reasoning reply is not walked character by character
    in Python. Braces before the first box cannot close one."""
    starts = {m.end() - 1: m.start() for m in _BOX_OPEN.finditer(text)}
    if not starts:
        return []
    found: list[tuple[int, int, str]] = []
    stack: list[int] = []
    for m in _BRACE.finditer(text, min(starts)):
        i = m.start()
        if text[i] == "{":
            stack.append(i)
        elif stack:
            opened = stack.pop()
            if opened in starts:
                found.append((starts[opened], i + 1, text[opened + 1 : i]))
    found.sort()
    return found


def has_box_opener(text: str) -> bool:
    """Whether the reply opens a box at all (closed or not): tells "no box" from "a box that never closes"."""
    return _BOX_OPEN.search(text) is not None


def last_open_box(text: str) -> str | None:
    """The content of the box the last literal ``\\boxed{`` opens, None when there is none or it never
    closes (NeMo Gym's rule: an earlier complete box does not count)."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for i in range(begin, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            if depth == 0:
                return text[begin:i]
            depth -= 1
    return None
