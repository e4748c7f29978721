"""NeMo Gym compatibility for mcqa: read a reply exactly the way NeMo Gym 0.7's verifiers do.

Used only when a task (or the environment) sets ``nemo_compat``. NeMo Gym's ``mcqa`` and
``gpqa_diamond`` resources servers differ from Palaestra's own reading (``extract.py``) in ways that
matter for training parity but that Palaestra considers wrong by default: they take the *first*
``Answer:`` rather than the last, accept a reply naming several options (``\\boxed{B, C}`` under
gpqa is C, ``Answer: A or B`` is A), read the first letter of a word as an option (``Final Choice:
Electrophoresis`` is E under an ``output_regex``), and refuse ``Answer: C.``. This module is a clean
re-statement of that behaviour (written from its documented and measured behaviour, see
docs/nemo_gym_parity.md), checked verdict for verdict against the installed NeMo Gym wheel by
tests/parity/test_nemo_parity.py. Every function returns the letter NeMo Gym would extract, or None.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Sequence

from palaestra.envs.mcqa.reading import Options
from palaestra.envs.text import last_open_box

# Letters of other scripts (Arabic, Bengali, full-width) NeMo Gym reads as the Latin option letters,
# each preceded by a space, after NFKC normalisation.
_SCRIPT_LETTERS = {
    "أ": " A", "ب": " B", "ج": " C", "د": " D",
    "অ": " A", "ব": " B", "ড": " C", "ঢ": " D",
    "Ａ": " A", "Ｂ": " B", "Ｃ": " C", "Ｄ": " D",
}
_TEXT_WRAPPER = re.compile(r"\\text\{\s*(.*?)\s*\}", re.DOTALL)
_ONLY_LETTER = re.compile(r"[^A-Za-z]*([A-Z])[^A-Za-z]*")
_LETTER_LABEL = re.compile(r"\s*([A-Z])\s*[:).\-]")
_ANSWER_COLON = re.compile(r"answer\s*:\s*(.+)", re.IGNORECASE)
_GPQA_BOX = re.compile(r"\\boxed\{([^}]*)\}", re.DOTALL)
_GPQA_WORD_LETTER = re.compile(r"\b([A-Z])\b")
_GPQA_ANSWER = re.compile(r"[*_]{0,2}Answer[*_]{0,2}\s*:[\s*_]{0,2}\s*([A-Z])(?![a-zA-Z0-9])", re.IGNORECASE)


def _unwrap_text(s: str) -> str:
    """Peel ``\\text{...}`` wrappers that enclose the whole string."""
    while (m := _TEXT_WRAPPER.fullmatch(s)) is not None:
        s = m.group(1)
    return s


def _squash(s: str) -> str:
    return " ".join(s.lower().split())


def _script_letters(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    for other, latin in _SCRIPT_LETTERS.items():
        text = text.replace(other, latin)
    return text.strip()


def _option_by_text(fragment: str, options: Options, letters: Collection[str]) -> str | None:
    """The first option (in order) whose squashed text equals the squashed fragment."""
    target = _squash(fragment)
    for letter, text in options:
        if letter in letters and _squash(text) == target:
            return letter
    return None


def strict_boxed(text: str, letters: Collection[str]) -> str | None:
    """``strict_single_letter_boxed``: the last box holds one uppercase letter and no other letter, or
    starts with a letter label (``C: ...``, ``C) ...``, ``C. ...``, ``C - ...``)."""
    inner = last_open_box(text)
    if inner is None:
        return None
    inner = _unwrap_text(inner.strip())
    m = _ONLY_LETTER.fullmatch(inner) or _LETTER_LABEL.match(inner)
    letter = m.group(1) if m else None
    return letter if letter in letters else None


def lenient_boxed(text: str, options: Options, letters: Collection[str]) -> str | None:
    """``lenient_boxed``: strict, else the one option whose text is *contained in* the last box."""
    found = strict_boxed(text, letters)
    if found is not None:
        return found
    inner = last_open_box(text)
    if inner is None:
        return None
    inner = inner.strip()
    haystacks = [_squash(inner), _squash(_unwrap_text(inner))]
    hits = {letter for letter, option in options if letter in letters and _squash(option)
            and any(_squash(option) in h for h in haystacks)}
    return hits.pop() if len(hits) == 1 else None


def answer_colon(text: str, options: Options, letters: Collection[str]) -> str | None:
    """``lenient_answer_colon``: the rest of the line after the *first* ``answer:``: one letter of
    either case, or an option's exact text."""
    m = _ANSWER_COLON.search(text)
    if m is None:
        return None
    candidate = _unwrap_text(m.group(1)).strip()
    if len(candidate) == 1 and candidate.isalpha() and candidate.upper() in letters:
        return candidate.upper()
    return _option_by_text(candidate, options, letters)


def output_regex(text: str, patterns: str | Sequence[str], options: Options,
                 letters: Collection[str]) -> str | None:
    """``template_metadata.output_regex``: the last case-insensitive match of the first pattern that
    yields an answer; a single letter is trusted even when it is not an option, else the capture must
    equal an option's text. An invalid pattern yields nothing."""
    for pattern in [patterns] if isinstance(patterns, str) else list(patterns):
        try:
            matches = re.findall(pattern, text, re.IGNORECASE)
        except re.error:
            continue
        if not matches or not isinstance(matches[-1], str):
            continue
        captured = _script_letters(matches[-1].strip()).upper()
        if len(captured) == 1 and captured.isalpha():
            return captured
        found = _option_by_text(captured, options, letters)
        if found is not None:
            return found
    return None


def gpqa(text: str, letters: Collection[str]) -> str | None:
    """``gpqa_diamond``: the last ``\\boxed{}`` without nested braces (its one uppercase character, else
    its last standalone capital), else the last ``Answer: X``; dropped when not an option letter."""
    boxes = _GPQA_BOX.findall(text)
    found: str | None = None
    if boxes:
        content = boxes[-1].strip()
        if len(content) == 1 and content.isupper():
            found = content
        else:
            capitals = _GPQA_WORD_LETTER.findall(content)
            found = capitals[-1] if capitals else None
    if found is None:
        answers = _GPQA_ANSWER.findall(text)
        found = answers[-1].upper() if answers else None
    if found is not None and letters and found.upper() not in letters:
        return None
    return found.upper() if found is not None else None
