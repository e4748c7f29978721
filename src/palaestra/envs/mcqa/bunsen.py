"""NeMo Gym compatibility for BunsenBench chemistry rows: read a reply as NeMo Gym 0.7's
``bunsenbench_chemistry_mcq`` server does.

Used only under ``nemo_compat`` for rows of that server. Its reader is more forgiving about *where* the
answer is than Palaestra's ``<choice>`` reading, and stricter about *how* option text is written:

- Candidates, latest first: a tagged answer (``<choice>``, ``<answer>``, ``<response>``,
  ``<final_answer>``; a ``<choice>`` inside a restated ``<choices>`` list does not count), a
  ``\\boxed{}``, an ``Answer:`` line, ``the answer is ...`` / ``I choose ...``. The first candidate that
  names an option wins; failing all, the last line, then the first line, is read the same way.
- A candidate names an option by letter (one letter of either case, ``option B``, ``B)`` / ``B.`` /
  ``B:`` followed by a space, or a lone letter among punctuation) or by its exact text, after Unicode
  (NFKC), HTML-entity and sub/superscript normalisation but **with case kept**: ``h2o`` is not
  ``H2O``. Wrappers (quotes, markdown, ``\\boxed``, ``\\text``, brackets, end punctuation) are peeled
  and the reading tried again.

A clean restatement of that behaviour (NeMo Gym's code is neither copied nor imported), checked against
the installed wheel by tests/parity/test_nemo_parity_families.py.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Collection, Iterator

from palaestra.envs.mcqa.reading import Options

# Characters folded before option texts compare: sub/superscript digits and signs, dashes, times,
# middle dots, micro and fraction slashes.
_FOLD = str.maketrans(
    {
        **{c: str(i) for i, c in enumerate("₀₁₂₃₄₅₆₇₈₉")},
        **{c: str(i) for i, c in enumerate("⁰¹²³⁴⁵⁶⁷⁸⁹")},
        **dict.fromkeys("⁺₊＋", "+"),
        **dict.fromkeys("⁻₋−–—‒‑", "-"),
        **dict.fromkeys("×✕", "x"),
        **dict.fromkeys("·∙⋅•", "."),
        **dict.fromkeys("µμ", "u"),
        **dict.fromkeys("⁄∕", "/"),
    }
)
_TAG = re.compile(r"<\s*(answer|choice|response|final[_-]answer)\b[^>]*>(.*?)<\s*/\s*\1\s*>", re.I | re.S)
_CHOICES = re.compile(r"<\s*choices\b[^>]*>.*?<\s*/\s*choices\s*>", re.I | re.S)
_ANSWER_LINE = re.compile(r"^\s*(?:(?:[-*•]|\d+[.)])\s*)?(?:\*\*)?answer(?:\*\*)?\s*:\s*(.+?)\s*$", re.I | re.M)
# Anywhere in a line; the answer may start on the next line ("Answer:\nB").
_ANSWER_INLINE = re.compile(r"(?:\*\*)?answer(?:\*\*)?\s*:\s*(.+?)(?=[\r\n]|\Z)", re.I | re.S)
_PHRASE = re.compile(
    r"(?:the\s+(?:correct\s+)?answer\s+is|my\s+answer\s+is|i\s+(?:choose|select))\s+(.+?)(?:\n|\Z)", re.I | re.S
)
_OPTION_WORD = re.compile(r"(?:option|choice)\s+([A-Z])\s*[)\].:]?", re.I)
_LABEL = re.compile(r"([A-Z])[)\].:](?:\s|$)", re.I)
_LONE = re.compile(r"[^A-Za-z]*([A-Za-z])[^A-Za-z]*")
_BOX_WHOLE = re.compile(r"\\boxed\{\s*(.*?)\s*\}", re.S)
_TEXT_WHOLE = re.compile(r"\\(?:text|mathrm|operatorname)\{\s*(.*?)\s*\}", re.S)
_BOX_OPEN = re.compile(r"\\boxed\s*\{")
_EDGE = " \t\r\n`*_\"'"


def normalize(text: str) -> str:
    """Option text as compared: entities decoded, NFKC, the folds above, format characters dropped,
    whitespace runs collapsed. Case is kept."""
    text = unicodedata.normalize("NFKC", html.unescape(text)).translate(_FOLD)
    return " ".join("".join(ch for ch in text if unicodedata.category(ch) != "Cf").split())


def _boxes(text: str) -> Iterator[tuple[int, str]]:
    """(start, content) of each ``\\boxed{...}`` with balanced braces (a backslash escapes the next
    character); an unclosed box ends the search."""
    pos = 0
    while (m := _BOX_OPEN.search(text, pos)) is not None:
        depth, i = 1, m.end()
        while i < len(text) and depth:
            if text[i] == "\\":
                i += 2
                continue
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth:
            return
        yield m.start(), text[m.end() : i - 1]
        pos = i


def _candidates(text: str) -> list[tuple[int, str]]:
    lists = [m.span() for m in _CHOICES.finditer(text)]
    found = [
        (m.start(), m.group(2).strip())
        for m in _TAG.finditer(text)
        if not (m.group(1).lower() == "choice" and any(a <= m.start() < b for a, b in lists))
    ]
    found += list(_boxes(text))
    for pattern in (_ANSWER_LINE, _ANSWER_INLINE, _PHRASE):
        found += [(m.start(), m.group(1)) for m in pattern.finditer(text)]
    return found


def _letter(candidate: str, letters: Collection[str]) -> str | None:
    if len(candidate) == 1 and candidate.isalpha():
        return candidate.upper() if candidate.upper() in letters else None
    for m in (_OPTION_WORD.fullmatch(candidate), _LABEL.match(candidate), _LONE.fullmatch(candidate)):
        if m is not None and m.group(1).upper() in letters:
            return m.group(1).upper()
    return None


def _by_text(candidate: str, options: Options, letters: Collection[str]) -> str | None:
    target = normalize(candidate)
    return next((letter for letter, text in options if letter in letters and normalize(text) == target), None)


def _peel(candidate: str) -> str:
    """The candidate without the wrappers a model puts round an answer."""
    candidate = candidate.strip(_EDGE)
    if (m := _BOX_WHOLE.fullmatch(candidate)) is not None:
        candidate = m.group(1).strip()
    while (m := _TEXT_WHOLE.fullmatch(candidate)) is not None:
        candidate = m.group(1).strip()
    while len(candidate) >= 2 and candidate[0] in "([{\"'<" and candidate[-1] in ")]}\"'>":
        candidate = candidate[1:-1].strip(_EDGE)
    return candidate.strip(_EDGE + ".;,")


def _parse(candidate: str, options: Options, letters: Collection[str]) -> str | None:
    candidate = candidate.strip()
    for attempt in (candidate, _peel(candidate)) if candidate else ():
        if not attempt:
            return None
        found = _letter(attempt, letters) or _by_text(attempt, options, letters)
        if found is not None:
            return found
    return None


def read(text: str, options: Options, letters: Collection[str]) -> str | None:
    """The option letter NeMo Gym's BunsenBench server extracts from a (stripped, non-empty) reply, or
    None. ``letters``: the row's option letters (options with text) and the gold letter."""
    for _, candidate in sorted(_candidates(text), reverse=True):
        found = _parse(candidate, options, letters)
        if found is not None:
            return found
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in (lines[-1], lines[0]) if lines else ():
        found = _parse(line, options, letters)
        if found is not None:
            return found
    return None
