"""Answer extraction for multiple choice: turn free model text into the one option letter it commits to.

Models answer in many shapes (``\\boxed{B}``, ``Answer: B``, ``**B**``, the option's text...). Only a
*committed* answer counts: a box, an ``<answer>`` tag, an answer statement ("Answer: B", "the correct
answer is B", "B is correct"), or, failing those, an option named alone (the last line, a bold letter,
the whole reply). A letter that merely appears while reasoning ("(A) is wrong because...") is never
taken for the answer, and a reply that names several options ("B and C are correct", "A or B",
"\\boxed{B, C}", "The answer is B. Actually C.") is ``ambiguous``: it scores 0, it is not guessed.
Among several committed answers the last one wins ("Answer: A ... Answer: B" is B).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

GRADING_MODES = ("auto", "strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon")

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
        letter = str(key).strip().upper()
        if len(letter) != 1 or not "A" <= letter <= "Z":
            raise ValueError(f"option key {key!r} is not a single letter A-Z")
        out.append((letter, str(text)))
    if len({letter for letter, _ in out}) != len(out):
        raise ValueError("options repeat a letter")
    return out


_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")


def find_boxed(text: str) -> list[tuple[int, str]]:
    """Every ``\\boxed{...}`` / ``\\fbox{...}`` with balanced braces: (position, content), in order."""
    return [(start, content) for start, _, content in boxes(text)]


def boxes(text: str) -> list[tuple[int, int, str]]:
    """Every balanced box as (start, end, content), in order of position.

    One pass with a stack of open braces, so a reply full of unclosed boxes costs linear time, not
    quadratic (replies are model output: hostile input for a verifier)."""
    starts = {m.end() - 1: m.start() for m in _BOX_OPEN.finditer(text)}
    if not starts:
        return []
    found: list[tuple[int, int, str]] = []
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            opened = stack.pop()
            if opened in starts:
                found.append((starts[opened], i + 1, text[opened + 1 : i]))
    found.sort()
    return found


_LATEX_WRAP = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textit|mathit|mathsf|texttt|emph)\s*\{([^{}]*)\}")
_MARKUP = re.compile(r"[*_`$]")


def _unwrap(text: str) -> str:
    """Drop LaTeX text wrappers (nested ones too: ``\\textbf{\\text{C}}``)."""
    for _ in range(4):
        unwrapped = _LATEX_WRAP.sub(r"\1", text)
        if unwrapped == text:
            break
        text = unwrapped
    return text


@functools.lru_cache(maxsize=16384)
def _norm(text: str) -> str:
    """Compare option texts loosely: case, markdown, LaTeX text wrappers, spacing, end punctuation.

    Cached: every verify compares against all of its task's option texts, the same strings each time."""
    text = _unwrap(text)
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


def _mentions(text: str, letters: Sequence[str], options: Options) -> list[str]:
    """Distinct option letters named in ``text``, in order, ignoring restated option texts, articles
    and negated mentions."""
    for _, option_text in options:  # "B) Vitamin C": the C belongs to the option's text
        if len(option_text.strip()) > 1:
            text = re.sub(re.escape(option_text.strip()), " ", text, flags=re.IGNORECASE)
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


def _strong(text: str, letters: Sequence[str], options: Options) -> list[_Hit]:
    hits: list[_Hit] = []
    for pos, end, content in boxes(text):
        letter, cands = _read(content, letters, options)
        if letter or cands:
            hits.append((pos, end, letter, cands, "boxed"))
    for m in _ANSWER_TAG.finditer(text):
        letter, cands = _read(m.group(1), letters, options)
        if letter or cands:
            hits.append((m.start(), m.end(), letter, cands, "answer_tag"))
    for m in _ANSWER_PHRASE.finditer(text):
        fragment, end = _sentence(text, m.end())
        if "\\boxed" in fragment or "\\fbox" in fragment:
            continue  # "The answer is \boxed{B}": the box itself is the hit
        letter, cands = _read(fragment, letters, options)
        if letter or cands:
            hits.append((m.start(), end, letter, cands, "answer_phrase"))
    for pattern in (_LETTER_FIRST, _CONCLUSION):
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
    others = [m.group(1) for m in _REVISION.finditer(text, after) if m.group(1) in letters and m.group(1) != letter]
    return tuple(dict.fromkeys(others))


def _boxed_modes(text: str, letters: Sequence[str], options: Options, mode: str) -> Extraction:
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
    _, cands = _read(content, letters, options)
    if cands:
        return Extraction(None, reason=AMBIGUOUS, candidates=cands)
    return Extraction(None, reason="boxed_not_single_letter")


def extract(text: str, options: Options, mode: str = "auto") -> Extraction:
    """The answer letter in ``text`` under ``mode``; the last committed answer wins."""
    letters = [letter for letter, _ in options] or [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    if not text or not text.strip():
        return Extraction(None, reason="empty_response")
    if mode in ("strict_single_letter_boxed", "lenient_boxed"):
        return _boxed_modes(text, letters, options, mode)
    if mode == "lenient_answer_colon":
        colons = list(re.finditer(r"answer\s*:", text, re.IGNORECASE))
        if not colons:
            return Extraction(None, reason="no_answer_colon")
        fragment = text[colons[-1].end() :].strip().split("\n", 1)[0]
        letter = _single_letter(fragment, letters) or _by_text(fragment, options)
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
    _, end, letter, cands, method = max(hits, key=lambda h: (h[0], h[1]))
    if letter is None:
        return Extraction(None, method=method, reason=AMBIGUOUS, candidates=cands)
    revised = _revised(text, end, letter, letters)
    if revised:
        return Extraction(None, method=method, reason=AMBIGUOUS, candidates=(letter, *revised))
    return Extraction(letter, method=method)
