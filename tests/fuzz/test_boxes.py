"""``envs.text.boxes`` on brace soup: it visits only the braces from the first box on, and must find what
a stack over every character of the reply finds (the rule its docstring states), box for box."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from palaestra.envs.text import boxes

_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")

# Pieces that make and break boxes: openers, stray braces, text, nested groups.
PIECES = st.sampled_from(["\\boxed{", "\\fbox{", "\\boxed {", "{", "}", "}}", "B", "x y", "\\", "\\boxed", "\n", "é"])


def every_character(text: str) -> list[tuple[int, int, str]]:
    """The rule by definition: one stack over every brace of the reply, from its first character."""
    starts = {m.end() - 1: m.start() for m in _OPEN.finditer(text)}
    found, stack = [], []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            opened = stack.pop()
            if opened in starts:
                found.append((starts[opened], i + 1, text[opened + 1 : i]))
    return sorted(found)


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_boxes_match_a_stack_over_every_character(text: str) -> None:
    assert boxes(text) == every_character(text)
