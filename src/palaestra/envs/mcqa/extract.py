"""Answer extraction for multiple choice: turn free model text into the one option letter it commits to.

Models answer in many shapes (``\\boxed{B}``, ``Answer: B``, ``**B**``, the option's text...). Only a
*committed* answer counts: a box, an ``<answer>`` tag, an answer statement ("Answer: B", "the correct
answer is B", "B is correct"), or, failing those, an option named alone (the last line, a bold letter,
the whole reply). A letter that merely appears while reasoning ("(A) is wrong because...") is never
taken for the answer, and a reply that names several options ("B and C are correct", "A or B",
"\\boxed{B, C}", "The answer is B. Actually C.") is ``ambiguous``: it scores 0, it is not guessed.
Among several committed answers the last one wins ("Answer: A ... Answer: B" is B).

This module holds that default search (mode ``auto``) and the dispatch to the fixed modes (``modes.py``);
the readings they share (options, boxes, what a fragment names) are in ``reading.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from palaestra.envs.mcqa.modes import _boxed_modes, _boxed_or_answer_colon, _lone_letter
from palaestra.envs.mcqa.reading import AMBIGUOUS, Extraction, Options, _by_text, _mentions, _read, boxes

GRADING_MODES = ("auto", "strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon", "boxed_or_answer_colon")

_ANSWER_PHRASE = re.compile(
    r"(?:(?:final|correct|right|best)\s+(?:answer|option|choice)|\banswer|\bmy\s+(?:choice|pick))"
    r"\s*(?:\*\*)?\s*(?:is|would\s+be|should\s+be|must\s+be|:|=|-)\s*(?:\*\*)?\s*:?"
    r"|\bi\s+(?:choose|pick|select)\b|\bi(?:'ll|\s+will)\s+(?:go\s+with|choose|pick)\b|\bgoing\s+with\b"
    r"|\bit(?:'s|’s|\s+is|\s+must\s+be)\b",
    re.IGNORECASE,
)
_LETTER_FIRST = re.compile(
    r"(?<![A-Za-z0-9'’])(?:(?i:option|choice)\s+)?[(\[*]*([A-Z])[)\]*]*\s+is\s+(?:the\s+)?"
    r"(?i:correct|right|best|true)\b(?!\s+(?:only\s+)?if)"
)
# A conclusion closing its line: "A is wrong, C is wrong, so B."
_CONCLUSION = re.compile(
    r"(?i:\bso|\btherefore|\bhence|\bthus),?[ \t]+(?:(?i:option|choice)[ \t]+)?[(\[*]*([A-Z])[)\]*]*[.!]?[ \t]*$",
    re.MULTILINE,
)
_ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.IGNORECASE | re.DOTALL)
_BOLD = re.compile(r"\*\*[ \t]*[(\[]?([A-Z])[)\]]?(?:[.:)][^*\n]{0,200})?[ \t]*\*\*")
_ALONE = re.compile(r"^[\W_]*(?:(?i:option|choice|letter)\s+)?[\W_]*([A-Za-z])[\W_]*$")
# A change of mind after the committed answer: "The answer is B. Actually C." names two options.
_REVISION = re.compile(
    r"(?i:\bactually|\bwait|\bno|\bor|\bmaybe|\bperhaps|\brather|\binstead|\balternatively|\bhmm+|"
    r"\bcorrection|\bon\s+second\s+thought|\bscratch\s+that)"
    r"[\s,:;.!—–-]*(?i:it'?s\s+|it\s+is\s+|the\s+answer\s+is\s+|option\s+|choice\s+)?[(\[*]*([A-Z])"
    # ...standing as an answer ("Actually C.", "or C?", "wait, D is correct"), not "wait, A is 21%"
    r"[)\]*]*(?=\s*(?:[.!?,;]|$)|\s+(?i:is|seems|looks|would\s+be)\s+(?:the\s+)?(?i:correct|right|answer|better|best))"
)

# Hits are (position, end, letter or None, candidates, method).
_Hit = tuple[int, int, str | None, tuple[str, ...], str]


def _sentence(text: str, start: int) -> tuple[str, int]:
    """The answer statement after ``start``: to the end of its line and its first sentence."""
    stop = text.find("\n", start)
    line = text[start : stop if stop >= 0 else len(text)]
    m = re.search(r"(?<=[.!?])\s", line)
    fragment = line[: m.start()] if m else line
    return fragment, start + len(fragment)


def _may_match(text: str) -> tuple[bool, bool, bool, bool]:
    """Whether ``_ANSWER_TAG``, ``_ANSWER_PHRASE``, ``_LETTER_FIRST`` and ``_CONCLUSION`` can match ``text``.

    Each pattern needs one of a few words, ignoring case (``_LETTER_FIRST`` a literal "is"). In ASCII text
    ``str.lower`` folds case exactly as ``re.IGNORECASE`` does, so a pattern none of whose words occurs
    cannot match and is not run: each is a scan of the whole reply, and a short reply ("\\boxed{B}")
    holds none of them. Other text runs every pattern."""
    first = "is" in text
    if not text.isascii():
        return True, True, first, True
    low = text.lower()
    return ("<answer" in low,
            "answer" in low or "option" in low or "choice" in low or "pick" in low or "choose" in low
            or "select" in low or "go" in low or "it" in low,
            first,
            "so" in low or "therefore" in low or "hence" in low or "thus" in low)


def _strong(text: str, letters: Sequence[str], options: Options) -> list[_Hit]:
    hits: list[_Hit] = []
    for pos, end, content in boxes(text):
        letter, cands = _read(content, letters, options)
        if letter or cands:
            hits.append((pos, end, letter, cands, "boxed"))
    tag, phrase, letter_first, conclusion = _may_match(text)
    if tag:
        for m in _ANSWER_TAG.finditer(text):
            letter, cands = _read(m.group(1), letters, options)
            if letter or cands:
                hits.append((m.start(), m.end(), letter, cands, "answer_tag"))
    if phrase:
        for m in _ANSWER_PHRASE.finditer(text):
            fragment, end = _sentence(text, m.end())
            if "\\boxed" in fragment or "\\fbox" in fragment:
                continue  # "The answer is \boxed{B}": the box itself is the hit
            letter, cands = _read(fragment, letters, options)
            if letter or cands:
                hits.append((m.start(), end, letter, cands, "answer_phrase"))
    for pattern, may in ((_LETTER_FIRST, letter_first), (_CONCLUSION, conclusion)):
        if may:
            for m in pattern.finditer(text):
                if m.group(1) in letters:
                    hits.append((m.start(), m.end(), m.group(1), (), "answer_phrase"))
    return hits


def _weak(text: str, letters: Sequence[str], options: Options) -> list[_Hit]:
    whole = _by_text(text, options)
    if whole:  # the reply is exactly one option's text
        return [(0, len(text), whole, (), "option_text")]
    hits: list[_Hit] = []
    bold = [(m.start(), m.end(), m.group(1)) for m in _BOLD.finditer(text) if m.group(1) in letters]
    bold_letters = tuple(dict.fromkeys(letter for _, _, letter in bold))
    if len(bold_letters) > 1:
        hits.append((bold[-1][0], bold[-1][1], None, bold_letters, "bold"))
    elif bold:
        hits.append((bold[-1][0], bold[-1][1], bold[-1][2], (), "bold"))
    # Options named alone on a line. Several different ones ("A\nB\nC") are a restated list, not an answer.
    alone: list[tuple[int, str]] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        m = _ALONE.match(line.strip()) if len(line) <= 80 else None  # an option alone is a short line
        letter = m.group(1).upper() if m else None  # a line holding one letter, any case: "b", "**B.**"
        letter = letter if letter in letters else _by_text(line, options)
        if letter:
            alone.append((pos, letter))
        pos += len(line)
    alone_letters = tuple(dict.fromkeys(letter for _, letter in alone))
    if len(alone_letters) > 1:
        hits.append((alone[-1][0], len(text), None, alone_letters, "alone"))
    elif alone:
        hits.append((alone[-1][0], len(text), alone[-1][1], (), "alone"))
    return hits


def _revised(text: str, after: int, letter: str, letters: Sequence[str]) -> tuple[str, ...]:
    """Other options the reply turns to after its committed answer ("... Actually C")."""
    if after >= len(text):  # nothing after it (a revision names a word and a letter)
        return ()
    others = [m.group(1) for m in _REVISION.finditer(text, after) if m.group(1) in letters and m.group(1) != letter]
    return tuple(dict.fromkeys(others))


def extract(text: str, options: Options, mode: str = "auto") -> Extraction:
    """The answer letter in ``text`` under ``mode``; the last committed answer wins."""
    letters = [letter for letter, _ in options] or [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    if not text or not text.strip():
        return Extraction(None, reason="empty_response")
    if mode in ("strict_single_letter_boxed", "lenient_boxed"):
        return _boxed_modes(text, letters, options, mode)
    if mode == "boxed_or_answer_colon":
        return _boxed_or_answer_colon(text, letters, options)
    if mode == "lenient_answer_colon":
        colons = list(re.finditer(r"answer\s*:", text, re.IGNORECASE))
        if not colons:
            return Extraction(None, reason="no_answer_colon")
        fragment = text[colons[-1].end() :].strip().split("\n", 1)[0]
        letter = _lone_letter(fragment, letters) or _by_text(fragment, options)
        if letter:
            return Extraction(letter, method="answer_colon")
        _, cands = _read(fragment, letters, options)
        if cands:
            return Extraction(None, reason=AMBIGUOUS, candidates=cands)
        return Extraction(None, reason="answer_colon_not_an_option")
    hits = _strong(text, letters, options) or _weak(text, letters, options)
    if not hits:
        named = _mentions(text, letters, options)
        if len(named) > 1:
            return Extraction(None, reason=AMBIGUOUS, candidates=tuple(named))
        return Extraction(None, reason="no_committed_answer" if named else "no_option_letter_found")
    _, end, letter, cands, method = hits[0] if len(hits) == 1 else max(hits, key=lambda h: (h[0], h[1]))
    if letter is None:
        return Extraction(None, method=method, reason=AMBIGUOUS, candidates=cands)
    revised = _revised(text, end, letter, letters)
    if revised:
        return Extraction(None, method=method, reason=AMBIGUOUS, candidates=(letter, *revised))
    return Extraction(letter, method=method)
