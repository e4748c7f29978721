"""Answer extraction for multiple choice: turn free model text into one option letter.

Models answer in many shapes (``\\boxed{B}``, ``Answer: B``, ``**B**``, the option's text...). The
grading modes decide which shapes count; the default ``auto`` mode accepts all of them but ranks them,
so that a letter mentioned while reasoning ("(A) is wrong because...") never beats an explicit answer.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

GRADING_MODES = ("auto", "strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon")

Options = list[tuple[str, str]]


@dataclass(frozen=True)
class Extraction:
    """The extracted letter (or None), which pattern produced it, and why nothing matched."""

    letter: str | None
    method: str | None = None
    reason: str | None = None


def normalize_options(raw: Any) -> Options:
    """Accept the option shapes seen in the wild: ``[{"A": "x"}, ...]``, ``{"A": "x"}``, ``["x", ...]``.

    Raises ValueError (TypeError for a wrong container) naming the bad entry, so a data file can be fixed at
    the right line.
    """
    if raw is None:
        return []
    out: Options = []
    if isinstance(raw, dict):
        items = list(raw.items())
    elif isinstance(raw, list):
        items = []
        for i, entry in enumerate(raw):
            if isinstance(entry, str):
                items.append((chr(ord("A") + i), entry))
            elif isinstance(entry, dict) and len(entry) == 1:
                items.extend(entry.items())
            else:
                raise ValueError(f"options[{i}] must be a string or a one-key dict like {{'A': 'text'}}")
    else:
        raise TypeError(f"options must be a list or a dict, got {type(raw).__name__}")
    for key, text in items:
        letter = str(key).strip().upper()
        if len(letter) != 1 or not "A" <= letter <= "Z":
            raise ValueError(f"option key {key!r} is not a single letter A-Z")
        out.append((letter, str(text)))
    if len({letter for letter, _ in out}) != len(out):
        raise ValueError("options repeat a letter")
    return out


def find_boxed(text: str) -> list[tuple[int, str]]:
    """Every ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces: (position, content), in order."""
    found: list[tuple[int, str]] = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found.append((m.start(), text[m.end() : i - 1]))
    return found


_LATEX_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textit|mathit)\s*\{([^{}]*)\}")


_MARKUP = re.compile(r"[*_`$]")


@functools.lru_cache(maxsize=16384)
def _norm(text: str) -> str:
    """Compare option texts loosely: case, markdown, LaTeX text wrappers, spacing, end punctuation.

    Cached: every verify compares against all of its task's option texts, the same strings each time."""
    text = _LATEX_WRAP.sub(r"\1", text)
    text = " ".join(_MARKUP.sub("", text).lower().split())
    return text.strip(" .,;:!\"'")


def _by_text(fragment: str, options: Options) -> str | None:
    """The letter whose option text equals the fragment (only when exactly one option matches)."""
    target = _norm(fragment)
    if not target:
        return None
    hits = [letter for letter, text in options if _norm(text) == target]
    return hits[0] if len(hits) == 1 else None


def _single_letter(content: str, letters: Sequence[str]) -> str | None:
    """Strict reading: after dropping spaces and brackets, exactly one allowed uppercase letter."""
    core = re.sub(r"[\s\[\]().]", "", content)
    return core if len(core) == 1 and core in letters else None


def _letter_of(fragment: str, letters: Sequence[str], options: Options) -> str | None:
    """Read the letter an answer fragment names: the option text itself, or a leading letter."""
    fragment = _LATEX_WRAP.sub(r"\1", fragment).strip()
    by_text = _by_text(fragment, options)
    if by_text:
        return by_text
    head = re.sub(r"^[\s*_`(\[{\"']+", "", fragment)
    head = re.sub(r"^(?:option|choice)\s+", "", head, flags=re.IGNORECASE)
    head = re.sub(r"^[\s*_`(\[{\"']+", "", head)
    m = re.match(r"([A-Za-z])(?![A-Za-z0-9'])(\W*)", head)
    if not m:
        # "The answer is Paris, because..." -> try the text up to the first clause break.
        first = re.split(r"[\n,;]|\.\s", fragment, maxsplit=1)[0]
        return _by_text(first, options) if first != fragment else None
    letter = m.group(1)
    rest = head[m.end(1) :]
    if letter.islower():
        # A lowercase letter is only an answer when nothing follows it ("answer: b"), not "a bit".
        if rest.strip(" \t.)*]}_`\"'"):
            return None
        letter = letter.upper()
    return letter if letter in letters else None


_ANSWER_PHRASE = re.compile(
    r"(?:final\s+answer|correct\s+(?:answer|option|choice)|\banswer)\s*(?:\*\*)?\s*"
    r"(?:is|would\s+be|should\s+be|:|=|-)\s*(?:\*\*)?\s*:?",
    re.IGNORECASE,
)
_ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.IGNORECASE | re.DOTALL)
_WEAK = (
    ("bold", re.compile(r"\*\*\s*\(?([A-Z])\)?[.:)]?\s*\*\*")),
    ("parenthesized", re.compile(r"\(([A-Z])\)")),
    ("letter_paren", re.compile(r"(?<![A-Za-z0-9(])([A-Z])\)")),
    ("lone_letter", re.compile(r"^[\W_]*([A-Z])[\W_]*$", re.MULTILINE)),
)


def _strong(text: str, letters: Sequence[str], options: Options) -> list[tuple[int, str, str]]:
    hits: list[tuple[int, str, str]] = []
    for pos, content in find_boxed(text):
        letter = _letter_of(content, letters, options)
        if letter:
            hits.append((pos, letter, "boxed"))
    for m in _ANSWER_TAG.finditer(text):
        letter = _letter_of(m.group(1), letters, options)
        if letter:
            hits.append((m.start(), letter, "answer_tag"))
    for m in _ANSWER_PHRASE.finditer(text):
        line = text[m.end() :].split("\n", 1)[0]
        letter = _letter_of(line, letters, options)
        if letter:
            hits.append((m.start(), letter, "answer_phrase"))
    return hits


def _weak(text: str, letters: Sequence[str], options: Options) -> list[tuple[int, str, str]]:
    hits: list[tuple[int, str, str]] = [
        (m.start(), m.group(1), name)
        for name, pattern in _WEAK
        for m in pattern.finditer(text)
        if m.group(1) in letters
    ]
    whole = _by_text(text, options)
    if whole:  # the reply is exactly one option's text: nothing else can outrank it
        return [(len(text), whole, "option_text")]
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    last = _by_text(lines[-1], options) if lines else None
    if last:
        hits.append((len(text), last, "option_text"))
    return hits


def extract(text: str, options: Options, mode: str = "auto") -> Extraction:
    """The answer letter in ``text`` under ``mode``; the last explicit answer wins."""
    letters = [letter for letter, _ in options] or [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    if not text or not text.strip():
        return Extraction(None, reason="empty_response")
    if mode in ("strict_single_letter_boxed", "lenient_boxed"):
        boxes = find_boxed(text)
        if not boxes:
            return Extraction(None, reason="no_boxed_answer")
        content = boxes[-1][1]
        letter = _single_letter(content, letters)
        if letter:
            return Extraction(letter, method="boxed")
        if mode == "lenient_boxed":
            letter = _by_text(content, options)
            if letter:
                return Extraction(letter, method="boxed_option_text")
        return Extraction(None, reason="boxed_not_single_letter")
    if mode == "lenient_answer_colon":
        colons = list(re.finditer(r"answer\s*:", text, re.IGNORECASE))
        if not colons:
            return Extraction(None, reason="no_answer_colon")
        fragment = text[colons[-1].end() :].strip().split("\n", 1)[0]
        letter = _single_letter(fragment, letters) or _by_text(fragment, options)
        if letter:
            return Extraction(letter, method="answer_colon")
        return Extraction(None, reason="answer_colon_not_an_option")
    hits = _strong(text, letters, options) or _weak(text, letters, options)
    if not hits:
        return Extraction(None, reason="no_option_letter_found")
    _, letter, method = max(hits, key=lambda h: h[0])
    return Extraction(letter, method=method)
