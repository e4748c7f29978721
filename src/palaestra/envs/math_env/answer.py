"""Which part of a maths reply is its answer, and integer comparison without Python's digit limit.

Pure Python (no sympy): it runs in the server process, before any worker is asked. Only a *committed*
answer is taken: the last ``\\boxed{}``, else the last answer statement ("Answer: 12", "the final
answer is $\\frac{1}{2}$"), else a last line that holds nothing but an expression. A number that merely
appears while reasoning ("Adding them gives 124, then...") is not an answer, and an answer that offers
alternatives ("3 or 5") is ``ambiguous``: it scores 0, it is not guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from palaestra.envs.text import boxes, has_box_opener


def boxed_contents(text: str) -> list[str]:
    """The contents of every balanced ``\\boxed{...}`` / ``\\fbox{...}``, in order of position (the
    shared linear-time reading in ``envs/text.py``)."""
    return [content for _, _, content in boxes(text)]


def last_boxed(text: str) -> str | None:
    """The content of the last non-empty ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced."""
    for content in reversed(boxed_contents(text)):
        if content.strip():
            return content.strip()
    return None


@dataclass(frozen=True)
class Answer:
    """The committed answer text (or None), where it came from, and why nothing was taken."""

    text: str | None
    source: str | None = None
    reason: str | None = None


_STATEMENT = re.compile(r"(?:final\s+answer|\banswer)\s*(?:\*\*)?\s*(?:is|:|=)\s*(?:\*\*)?\s*:?", re.IGNORECASE)
# Words outside LaTeX commands: a last line with none ("124", "$x = \frac{1}{2}$") is an expression alone.
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_TEXT_WRAP = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{([^{}]*)\}")
# Alternatives offered as the answer: "3 or 5", "3 \text{ or } 5", "either 2 or 4".
_ALTERNATIVES = re.compile(r"(?i)\bor\b")


def _strip_math(fragment: str) -> str:
    """Drop the wrapping of an answer statement: markdown bold, ``$...$``, a sentence's full stop."""
    previous = None
    while previous != fragment:
        previous = fragment
        fragment = fragment.strip().strip("*$").rstrip(".").strip()
    return fragment


def committed_answer(text: str, *, alternatives_allowed: bool = False) -> Answer:
    """The answer ``text`` commits to: the last box, else the last answer statement, else a last line
    that is only an expression. ``alternatives_allowed``: the expected answer itself reads "x = 2 or
    x = 3", so "or" in the answer is not a hedge."""
    if not text.strip():
        return Answer(None, reason="empty_response")
    boxed = last_boxed(text)
    source: str
    if boxed is None and has_box_opener(text) and not boxed_contents(text):
        # "... \\boxed{3" never closes: the reply broke off (often at the token limit), so what follows
        # the opener is not a committed answer (it may be the first digit of 32).
        return Answer(None, source="boxed", reason="unclosed_box")
    if boxed is not None:
        fragment, source = boxed, "boxed"
    else:
        statements = list(_STATEMENT.finditer(text))
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        if statements:
            start = statements[-1].end()
            stop = text.find("\n", start)
            fragment, source = _strip_math(text[start : stop if stop >= 0 else len(text)]), "answer_statement"
        elif lines and (plain_integer(lines[-1]) is not None
                        or (len(lines[-1]) <= 500 and not _WORD.search(_TEXT_WRAP.sub("", lines[-1])))):
            fragment, source = _strip_math(lines[-1]), "last_line"
        else:
            return Answer(None, reason="no_committed_answer")
    if not fragment:
        return Answer(None, source=source, reason="no_committed_answer")
    if not alternatives_allowed and _ALTERNATIVES.search(_TEXT_WRAP.sub(r" \1 ", fragment)):
        return Answer(None, source=source, reason="ambiguous")
    return Answer(fragment, source=source)


_INT_SEPARATORS = re.compile(r"\\[,;:! ]|\{,\}|\\text\{\s*\}|~")


def plain_integer(text: str) -> str | None:
    """The canonical digit string of an answer that is just an integer ("1,000", "1\\,000", "+007",
    "$-12$"), else None. Compared as strings, so a 50,000-digit answer needs no int() (and so no
    ``sys.set_int_max_str_digits``) and costs linear time."""
    s = _INT_SEPARATORS.sub("", text.strip().strip("$").strip())
    s = s.replace(" ", "")
    if re.fullmatch(r"[+-]?\d{1,3}(?:,\d{3})+", s):
        s = s.replace(",", "")
    m = re.fullmatch(r"([+-]?)(\d+)", s)
    if not m:
        return None
    digits = m.group(2).lstrip("0") or "0"
    return digits if m.group(1) != "-" or digits == "0" else f"-{digits}"
