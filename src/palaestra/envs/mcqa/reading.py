"""How pieces of a multiple-choice reply are read: the question's options, the ``\\boxed{}`` answers in a
reply, and what one answer fragment names (one option, several, or none).

These are the primitives every grading mode shares (``extract.py``: the default search for a committed
answer, ``modes.py``: the fixed modes a dataset asks for), kept apart so each reading rule has one home.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from palaestra.envs.text import boxes

Options = list[tuple[str, str]]

AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class Extraction:
    """The extracted letter (or None), which pattern produced it, why nothing was taken, and (for an
    ambiguous reply) the options it named."""

    letter: str | None
    method: str | None = None
    reason: str | None = None
    candidates: tuple[str, ...] = field(default=())


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
        if type(key) is str and len(key) == 1 and "A" <= key <= "Z":  # already what the rest makes of it
            letter = key
        else:
            letter = str(key).strip().upper()
            if len(letter) != 1 or not "A" <= letter <= "Z":
                raise ValueError(f"option key {key!r} is not a single letter A-Z")
        out.append((letter, text if type(text) is str else str(text)))
    if len({letter for letter, _ in out}) != len(out):
        raise ValueError("options repeat a letter")
    return out


def find_boxed(text: str) -> list[tuple[int, str]]:
    """Every ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces: (position, content), in order."""
    return [(start, content) for start, _, content in boxes(text)]


_LATEX_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textit|mathit|mathsf|texttt|emph)\s*\{([^{}]*)\}")
_MARKUP = re.compile(r"[*_`$]")


def _unwrap(text: str) -> str:
    """Drop LaTeX text wrappers (nested ones too: ``\\textbf{\\text{C}}``)."""
    if "\\" not in text:  # every wrapper starts with a backslash: most texts have none, and skip the regex
        return text
    for _ in range(4):
        unwrapped = _LATEX_WRAP.sub(r"\1", text)
        if unwrapped == text:
            break
        text = unwrapped
    return text


@functools.lru_cache(maxsize=16384)
def _norm(text: str, fold_case: bool = True) -> str:
    """Compare option texts loosely: Unicode compatibility forms (NFKC: ``H₂O`` is ``H2O``), markdown, LaTeX
    text wrappers, spacing, end punctuation, and case unless ``fold_case`` is off.

    Cached: every verify compares against all of its task's option texts, the same strings each time."""
    if not text.isascii():  # NFKC leaves ASCII as it is
        text = unicodedata.normalize("NFKC", text)
    text = " ".join(_MARKUP.sub("", _unwrap(text)).split())
    return (text.lower() if fold_case else text).strip(" .,;:!\"'")


def _by_text(fragment: str, options: Options) -> str | None:
    """The letter whose option text equals the fragment (only when exactly one option matches).

    Case is ignored unless it tells options apart: where two options differ only in case (``CO`` and
    ``Co``, carbon monoxide and cobalt), the fragment must match one in its case, so ``CO`` is CO and
    ``co`` names neither. A reply whose case is off but that can mean one option only (``ketone`` for
    ``Ketone``, ``h2o`` for ``H2O``) still names it."""
    target = _norm(fragment)
    if not target:
        return None
    first = target[0]
    # The normal form of ASCII text is made of its own characters, lowered: an ASCII option text without
    # the target's first character cannot equal it, and is not normalized to find that out.
    hits = [(letter, text) for letter, text in options
            if (first in text.lower() or not text.isascii()) and _norm(text) == target]
    if len(hits) > 1:
        cased = _norm(fragment, fold_case=False)
        hits = [(letter, text) for letter, text in hits if _norm(text, fold_case=False) == cased]
    return hits[0][0] if len(hits) == 1 else None


# An uppercase letter standing alone is an option mention ("B", "(B)", "B)", "option B")...
_MENTION = re.compile(r"(?<![A-Za-z0-9'’\\])([A-Z])(?![A-Za-z0-9'’])")
# ...except the article "A" and the pronoun "I" in running text ("A nitrogen atom", "I think"): one
# followed by a lowercase word that is not a conjunction or a verb of judgement.
_LINKS = {"or", "and", "nor", "is", "was", "are", "seems", "looks", "fits", "matches", "vs", "versus", "then",
          "but", "too", "also", "would", "should", "could", "might", "must", "can", "will", "appears", "if",
          "because", "since", "as", "being", "has", "remains", "wins", "alone", "only"}
_AFTER_WORD = re.compile(r"\s+([a-z]+)")
# Mentions that reject an option rather than choose it: "not C", "rather than C", "instead of C".
_NEGATED = re.compile(r"(?i:\bnot|\bthan|\binstead\s+of|\bexcept|\bexcluding|\bisn'?t|\bover)\s*[(\[*]*$")


# The only non-ASCII characters that ``re.IGNORECASE`` matches to an ASCII one: dotted and dotless I,
# the long s and the Kelvin sign (tests/envs/test_mcqa_extraction.py checks every code point).
_ASCII_FOLDS = frozenset("\u0130\u0131\u017f\u212a")


def blank_out(text: str, phrase: str) -> str:
    """Every occurrence of ``phrase`` in ``text``, ignoring case, replaced by a space: what
    ``re.sub(re.escape(phrase), " ", text, flags=re.IGNORECASE)`` gives, without compiling a pattern.

    Each row's options are new text, so that pattern was compiled anew for every option of every reply
    (``re`` keeps 512 patterns; a real dataset has thousands of distinct options): 0.1 ms per rollout,
    more than the rest of mcqa's grading. Where both are ASCII, ``str.lower`` keeps every index and
    folds case exactly as ``re.IGNORECASE`` does, so the occurrences are found with ``str.find``,
    leftmost first and without overlap, as ``re.sub`` finds them; other text still goes through ``re``
    (its Unicode case folding, such as the Kelvin sign matching ``k``, is not ``str.lower``'s).

    Two answers need no search at all, so no pattern is compiled for them: a phrase longer than the text
    (``re.IGNORECASE`` matches one character for one, so a match is as long as the phrase: a short reply
    like ``B`` never holds an option's text), and ASCII text against a phrase holding a character that
    no ASCII character matches under ``re.IGNORECASE`` (all but ``_ASCII_FOLDS``: ``H₂O``, ``90°`` and
    ``α`` are never found in an ASCII reply)."""
    if len(phrase) > len(text):
        return text
    if not (text.isascii() and phrase.isascii()) or not phrase:
        if text.isascii() and any(not c.isascii() and c not in _ASCII_FOLDS for c in phrase):
            return text
        return re.sub(re.escape(phrase), " ", text, flags=re.IGNORECASE)
    low, key = text.lower(), phrase.lower()
    at = low.find(key)
    if at < 0:
        return text
    parts: list[str] = []
    start = 0
    while at >= 0:
        parts += (text[start:at], " ")
        start = at + len(key)
        at = low.find(key, start)
    parts.append(text[start:])
    return "".join(parts)


def _mentions(text: str, letters: Sequence[str], options: Options) -> list[str]:
    """Distinct option letters named in ``text``, in order, ignoring restated option texts, articles
    and negated mentions."""
    for _, option_text in options:  # "B) Vitamin C": the C belongs to the option's text
        phrase = option_text.strip()
        if 1 < len(phrase) <= len(text):  # a longer one is never in the text (blank_out says why)
            text = blank_out(text, phrase)
    seen: list[str] = []
    for m in _MENTION.finditer(text):
        letter = m.group(1)
        if letter not in letters or letter in seen:
            continue
        if letter in ("A", "I"):
            nxt = _AFTER_WORD.match(text, m.end())
            if nxt and nxt.group(1) not in _LINKS:
                continue
        if _NEGATED.search(text[max(0, m.start() - 24) : m.start()]):
            continue
        seen.append(letter)
    return seen


_HEAD_PREFIX = re.compile(r"^(?:[\s*_`(\[{\"'>]|(?i:option|choice|letter)\s+)+")
_HEAD = re.compile(r"([A-Za-z])(?![A-Za-z0-9'’])")


def _read(fragment: str, letters: Sequence[str], options: Options) -> tuple[str | None, tuple[str, ...]]:
    """What an answer fragment commits to: ``(letter, ())``, ``(None, candidates)`` when it names
    several options, ``(None, ())`` when it names none."""
    fragment = _unwrap(fragment).strip()
    whole = _by_text(fragment, options)
    if whole:
        return whole, ()
    if len(fragment) == 1 and "A" <= fragment <= "Z":  # one capital letter, as asked: what the rest finds
        return (fragment, ()) if fragment in letters else (None, ())
    head_letter: str | None = None
    head = _HEAD_PREFIX.sub("", fragment)
    m = _HEAD.match(head)
    if m:
        rest = head[m.end() :]
        if m.group(1).isupper():
            head_letter = m.group(1)
        elif not rest.strip(" \t.*]}_`\"'") or re.match(r"\s*[):]", rest):
            # A lowercase letter is only an answer alone or as a label ("answer: b", "b) text"), not "a bit".
            head_letter = m.group(1).upper()
    named = _mentions(fragment, letters, options)
    if head_letter is not None and head_letter in letters and head_letter not in named:
        named.insert(0, head_letter)
    if len(named) > 1:
        return None, tuple(named)
    if named:
        return named[0], ()
    # "The answer is Paris, because..." -> the text up to the first clause break names the option.
    first = re.split(r"[\n,;(]|\.\s|\s[-–—]\s", fragment, maxsplit=1)[0]
    return (_by_text(first, options) if first != fragment else None), ()
