"""The fixed grading modes a dataset can ask for instead of the default search (``extract.py``): a single
letter in the last box (strict or lenient), gpqa_diamond's box-else-``Answer:`` reading, and a row's own
``output_regex``. Each still refuses a reply naming several options (ambiguous), as the default does."""

from __future__ import annotations

import re
from collections.abc import Sequence

from palaestra.envs.mcqa.reading import (
    _MARKUP,
    AMBIGUOUS,
    Extraction,
    Options,
    _by_text,
    _norm,
    _read,
    _unwrap,
    find_boxed,
)


def _single_letter(content: str, letters: Sequence[str]) -> str | None:
    """Strict reading: after dropping spaces and brackets, exactly one allowed uppercase letter."""
    core = re.sub(r"[\s\[\]{}().]", "", content)
    return core if len(core) == 1 and core in letters else None


# A letter labelling the option text after it: "C: text", "C) text", "(C) text", "C. Carbon dioxide".
_LABEL = re.compile(r"[(\[]?([A-Z])\s*([:.)\]\-–—])\s*")


def _label(content: str, letters: Sequence[str], options: Options) -> str | None:
    """The letter a box's content starts with as a label. ``:``, ``)`` and ``]`` always label; ``.`` and
    ``-`` only when what follows is not a lowercase word (``\\boxed{E. coli}`` is not option E) or is the
    option's own text."""
    m = _LABEL.match(content)
    if m is None or m.group(1) not in letters:
        return None
    rest = content[m.end() :]
    if m.group(2) in ".-–—" and rest[:1].islower():
        own = dict(options).get(m.group(1))
        if own is None or _norm(rest) != _norm(own):
            return None
    return m.group(1)


def _bare(content: str) -> str:
    """A box's content without LaTeX text wrappers and markdown (``\\text{C}``, ``**C**``)."""
    return _MARKUP.sub("", _unwrap(content)).strip()


def _boxed_modes(text: str, letters: Sequence[str], options: Options, mode: str) -> Extraction:
    boxes = find_boxed(text)
    if not boxes:
        return Extraction(None, reason="no_boxed_answer")
    content = boxes[-1][1]
    letter = _single_letter(content, letters) or _single_letter(_bare(content), letters)
    if letter:
        return Extraction(letter, method="boxed")
    whole = _by_text(content, options)
    if whole:  # the box holds an option's text: that option under lenient_boxed, never a label
        if mode == "lenient_boxed":
            return Extraction(whole, method="boxed_option_text")
        return Extraction(None, reason="boxed_not_single_letter")
    _, cands = _read(content, letters, options)
    if cands:
        return Extraction(None, reason=AMBIGUOUS, candidates=cands)
    letter = _label(_bare(content), letters, options)
    if letter:
        return Extraction(letter, method="boxed_label")
    return Extraction(None, reason="boxed_not_single_letter")


def _lone_letter(fragment: str, letters: Sequence[str]) -> str | None:
    """One letter of either case and nothing else but brackets, markup and a full stop (``c``, ``(C).``,
    ``**C**``, ``\\text{C}``)."""
    core = re.sub(r"[\s\[\]().*_`$]", "", _unwrap(fragment))
    return core.upper() if len(core) == 1 and core.upper() in letters else None


_ANSWER_LABEL = re.compile(r"[*_]{0,2}answer[*_]{0,2}\s*:[*_]{0,2}", re.IGNORECASE)


def _boxed_or_answer_colon(text: str, letters: Sequence[str], options: Options) -> Extraction:
    """gpqa_diamond's reading without its guesses: the last box when it commits to an option (or names
    several: ambiguous), else what the last ``Answer:`` line commits to."""
    boxed = _boxed_modes(text, letters, options, "strict_single_letter_boxed")
    if boxed.letter or boxed.reason == AMBIGUOUS:
        return boxed
    labels = list(_ANSWER_LABEL.finditer(text))
    if not labels:
        return Extraction(None, reason="no_boxed_answer_or_answer_colon")
    fragment = text[labels[-1].end() :].strip().split("\n", 1)[0]
    letter = _lone_letter(fragment, letters)
    if letter:
        return Extraction(letter, method="answer_colon")
    letter, cands = _read(fragment, letters, options)
    if cands:
        return Extraction(None, reason=AMBIGUOUS, candidates=cands)
    if letter:
        return Extraction(letter, method="answer_colon")
    return Extraction(None, reason="answer_colon_not_an_option")


def by_output_regex(text: str, patterns: Sequence[str], options: Options) -> Extraction | None:
    """The answer a row's own ``template_metadata.output_regex`` finds (its first group, else the whole
    match; the last match, case-insensitive), or None when no pattern matches, so the grading mode
    decides. A capture that is only the first letter of a word (``Final Choice: Electrophoresis``) is
    not an answer; one that goes on to name other options (``Answer: A or B``) is ambiguous."""
    letters = [letter for letter, _ in options] or [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    for pattern in patterns:
        matches = list(re.finditer(pattern, text, re.IGNORECASE))
        if not matches:
            continue
        m = matches[-1]
        group = 1 if m.re.groups else 0
        captured, start, end = m.group(group) or "", m.start(group), m.end(group)
        core = captured.strip()
        if len(core) == 1 and core.isalpha():
            if text[end : end + 1].isalpha():
                continue  # the first letter of a word
            line_end = text.find("\n", start)
            _, cands = _read(text[start : line_end if line_end >= 0 else len(text)], letters, options)
            if cands and core.upper() in cands:
                return Extraction(None, method="output_regex", reason=AMBIGUOUS, candidates=cands)
            return Extraction(core.upper(), method="output_regex")
        letter, cands = _read(core, letters, options) if core else (None, ())
        if cands:
            return Extraction(None, method="output_regex", reason=AMBIGUOUS, candidates=cands)
        if letter:
            return Extraction(letter, method="output_regex")
    return None
