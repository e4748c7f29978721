"""Verifiable constraints on a response's form, each checkable by code alone (no model, no language
detector), so instruction following can be scored exactly and reproducibly.

A constraint is a dict ``{"kind": NAME, **params}``. Counting kinds take ``min`` and/or ``max``
(inclusive; ``min == max`` asks for an exact count). Every kind can describe itself in words, so the
prompt states exactly what the checker will test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Params = dict[str, Any]
Result = tuple[bool, str]

_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")
_BULLET = re.compile(r"^\s*[*\-+]\s+\S", re.MULTILINE)
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+\S", re.MULTILINE)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S", re.MULTILINE)
_HIGHLIGHT = re.compile(r"\*\*[^*\n]+\*\*|(?<!\*)\*[^*\n]+\*(?!\*)")
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]+\]")
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n\s*```\s*$", re.DOTALL | re.IGNORECASE)


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def sentences(text: str) -> list[str]:
    """Sentences end at ., ! or ? followed by a space or the end; bullets and lines also end one."""
    parts = re.split(r"(?<=[.!?])\s+|\n+", text.strip())
    return [p for p in parts if words(p)]


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def _phrase_count(text: str, phrase: str) -> int:
    """Whole-word, case-insensitive occurrences (a phrase may span several words)."""
    pattern = r"(?<![\w])" + r"\s+".join(map(re.escape, phrase.split())) + r"(?![\w])"
    return len(re.findall(pattern, text, re.IGNORECASE))


def _range(n: int, p: Params, what: str) -> Result:
    lo, hi = p.get("min"), p.get("max")
    ok = (lo is None or n >= lo) and (hi is None or n <= hi)
    return ok, f"{n} {what}"


def _bounds(p: Params, what: str) -> str:
    lo, hi = p.get("min"), p.get("max")
    if lo is not None and lo == hi:
        return f"exactly {lo} {what}"
    if lo is not None and hi is not None:
        return f"between {lo} and {hi} {what}"
    return f"at least {lo} {what}" if lo is not None else f"at most {hi} {what}"


def _unfence_json(text: str) -> str:
    m = _FENCE.match(text)
    return m.group(1) if m else text


def _json_ok(text: str, p: Params) -> Result:
    try:
        json.loads(_unfence_json(text).strip())
    except ValueError as exc:
        return False, f"not valid JSON: {exc}"
    return True, "valid JSON"


def _two_responses(text: str, p: Params) -> Result:
    parts = [s.strip() for s in text.split("******")]
    ok = len(parts) == 2 and all(parts) and parts[0] != parts[1]
    return ok, f"{len(parts)} part(s) separated by ******" + ("" if ok or len(parts) != 2 else ", identical or empty")


def _postscript(text: str, p: Params) -> Result:
    marker = str(p.get("marker", "P.S."))
    lines = text.strip().splitlines()
    hits = [i for i, ln in enumerate(lines) if ln.strip().upper().startswith(marker.upper())]
    ok = bool(hits) and hits[-1] > 0
    return ok, "postscript found" if ok else f"no line starting with {marker!r} after the body"


def _starts(text: str, p: Params) -> Result:
    ok = text.strip().lower().startswith(str(p["phrase"]).strip().lower())
    return ok, f"starts with {text.strip()[:40]!r}"


def _ends(text: str, p: Params) -> Result:
    ok = text.strip().lower().endswith(str(p["phrase"]).strip().lower())
    return ok, f"ends with {text.strip()[-40:]!r}"


def _quoted(text: str, p: Params) -> Result:
    t = text.strip()
    ok = len(t) >= 2 and ((t[0] == t[-1] == '"') or (t[0] == "“" and t[-1] == "”"))
    return ok, "wrapped in double quotes" if ok else "not wrapped in double quotes"


def _keywords(text: str, p: Params) -> Result:
    missing = [w for w in p["words"] if _phrase_count(text, w) == 0]
    return not missing, f"missing {missing}" if missing else "all present"


def _forbidden(text: str, p: Params) -> Result:
    found = [w for w in p["words"] if _phrase_count(text, w) > 0]
    return not found, f"uses {found}" if found else "none used"


def _title(text: str, p: Params) -> Result:
    ok = re.search(r"<<[^<>\n]+>>", text) is not None
    return ok, "title found" if ok else "no <<title>>"


def _lower(text: str, p: Params) -> Result:
    upper = [c for c in text if c.isupper()]
    return not upper, f"{len(upper)} uppercase letter(s)"


def _upper(text: str, p: Params) -> Result:
    lower = [c for c in text if c.islower()]
    return not lower, f"{len(lower)} lowercase letter(s)"


def _no_commas(text: str, p: Params) -> Result:
    n = text.count(",") + text.count("，")
    return n == 0, f"{n} comma(s)"


def _no_digits(text: str, p: Params) -> Result:
    n = sum(c.isdigit() for c in text)
    return n == 0, f"{n} digit(s)"


def _repeat(text: str, p: Params) -> Result:
    want = " ".join(str(p["text"]).split()).lower()
    got = " ".join(text.split()).lower()
    ok = got.startswith(want) and len(got) > len(want)
    return ok, "request repeated first" if ok else "does not start with the request, or adds nothing after it"


def _question_end(text: str, p: Params) -> Result:
    ok = text.rstrip().endswith("?")
    return ok, "ends with a question" if ok else "does not end with '?'"


def _counter(count: Callable[[str, Params], int], what: str) -> Callable[[str, Params], Result]:
    return lambda text, p: _range(count(text, p), p, what)


@dataclass(frozen=True)
class Kind:
    """One constraint kind: its parameters, its check, and how to say it to the model."""

    name: str
    check: Callable[[str, Params], Result]
    describe: Callable[[Params], str]
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    counting: bool = False
    defaults: tuple[tuple[str, Any], ...] = ()

    def params(self, constraint: Params) -> Params:
        """The constraint's parameters with this kind's defaults filled in."""
        out = dict(self.defaults)
        out.update({k: v for k, v in constraint.items() if k != "kind"})
        return out


def _k(name: str, check: Callable[[str, Params], Result], describe: Callable[[Params], str],
       required: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> Kind:
    return Kind(name, check, describe, required, optional)


def _c(name: str, count: Callable[[str, Params], int], what: str, say: str,
       required: tuple[str, ...] = (), defaults: tuple[tuple[str, Any], ...] = ()) -> Kind:
    optional = ("min", "max") + tuple(k for k, _ in defaults)
    return Kind(name, _counter(count, what), lambda p: say.format(n=_bounds(p, what), **p), required,
                optional, counting=True, defaults=defaults)


KINDS: dict[str, Kind] = {k.name: k for k in (
    _c("word_count", lambda t, p: len(words(t)), "words", "Use {n}."),
    _c("sentence_count", lambda t, p: len(sentences(t)), "sentences", "Write {n}."),
    _c("paragraph_count", lambda t, p: len(paragraphs(t)), "paragraphs",
       "Write {n}, separated by blank lines."),
    _c("char_count", lambda t, p: len(t.strip()), "characters", "Use {n} in total."),
    _c("keyword_frequency", lambda t, p: _phrase_count(t, str(p["word"])), "times",
       "Use the word \"{word}\" {n}.", required=("word",)),
    _c("letter_frequency", lambda t, p: t.lower().count(str(p["letter"]).lower()), "times",
       "Use the letter \"{letter}\" {n}.", required=("letter",)),
    _c("bullet_count", lambda t, p: len(_BULLET.findall(t)), "markdown bullet points",
       "Include {n} (lines starting with \"* \" or \"- \")."),
    _c("numbered_list", lambda t, p: len(_NUMBERED.findall(t)), "numbered list items",
       "Include {n} (lines like \"1. ...\")."),
    _c("sections", lambda t, p: len(re.findall(rf"^\s*{re.escape(str(p.get('marker', 'SECTION')))}\s+\d+",
                                              t, re.MULTILINE)), "sections",
       "Divide the response into {n}, each starting with a line \"{marker} N\".",
       defaults=(("marker", "SECTION"),)),
    _c("markdown_headings", lambda t, p: len(_HEADING.findall(t)), "markdown headings",
       "Include {n} (lines starting with #)."),
    _c("highlighted", lambda t, p: len(_HIGHLIGHT.findall(t)), "highlighted parts",
       "Highlight {n} with markdown, like *this* or **this**."),
    _c("capital_words", lambda t, p: sum(1 for w in words(t) if len(w) > 1 and w.isupper()),
       "words in ALL CAPITALS", "Write {n}."),
    _c("placeholders", lambda t, p: len(_PLACEHOLDER.findall(t)), "placeholders in square brackets",
       "Include {n}, like [name]."),
    _k("keywords", _keywords, lambda p: "Include the words: " + ", ".join(f'"{w}"' for w in p["words"]) + ".",
       ("words",)),
    _k("forbidden_words", _forbidden,
       lambda p: "Do not use the words: " + ", ".join(f'"{w}"' for w in p["words"]) + ".", ("words",)),
    _k("json_format", _json_ok, lambda p: "Answer with valid JSON only (a ```json fence is allowed)."),
    _k("markdown_title", _title, lambda p: "Give the response a title wrapped in double angular brackets, "
       "like <<my title>>."),
    _k("lowercase", _lower, lambda p: "Write everything in lowercase letters; no capital letters at all."),
    _k("uppercase", _upper, lambda p: "Write everything in CAPITAL LETTERS; no lowercase letters at all."),
    _k("starts_with", _starts, lambda p: f"Start the response with \"{p['phrase']}\".", ("phrase",)),
    _k("ends_with", _ends, lambda p: f"End the response with the exact phrase \"{p['phrase']}\"; nothing may "
       "follow it.", ("phrase",)),
    _k("quotation", _quoted, lambda p: "Wrap the whole response in double quotation marks."),
    Kind("postscript", _postscript, lambda p: f"End with a postscript: a last part starting with "
         f"\"{p['marker']}\".", optional=("marker",), defaults=(("marker", "P.S."),)),
    _k("no_commas", _no_commas, lambda p: "Do not use any commas."),
    _k("no_digits", _no_digits, lambda p: "Do not use any digits; write numbers out in words."),
    _k("two_responses", _two_responses, lambda p: "Give two different responses, separated by a line of "
       "six asterisks: ******."),
    _k("repeat_prompt", _repeat, lambda p: f"First repeat this request word for word, then answer it: "
       f"\"{p['text']}\".", ("text",)),
    _k("ends_with_question", _question_end, lambda p: "End the response with a question."),
)}


# Kinds under other vocabularies' names (NeMo Gym's IFEval/IFBench instruction ids: nemo_ids.py), kept apart
# from KINDS so that KINDS stays Palaestra's own set (each of which a bundled example exercises).
EXTRA_KINDS: dict[str, Kind] = {}


def validate(constraint: Any) -> Kind:
    """Check one constraint's kind and parameters; ValueError says what is wrong and what is allowed."""
    if not isinstance(constraint, dict) or "kind" not in constraint:
        raise ValueError(f"a constraint must be an object with a 'kind', got {constraint!r}")
    kind = KINDS.get(str(constraint["kind"])) or EXTRA_KINDS.get(str(constraint["kind"]))
    if kind is None:
        raise ValueError(f"unknown constraint kind {constraint['kind']!r}; known: {', '.join(sorted(KINDS))}")
    params = {k: v for k, v in constraint.items() if k != "kind"}
    allowed = set(kind.required) | set(kind.optional)
    extra = sorted(set(params) - allowed)
    missing = [r for r in kind.required if r not in params]
    if extra or missing:
        raise ValueError(f"constraint {kind.name}: unknown {extra} / missing {missing}; takes {sorted(allowed)}")
    if kind.counting:
        lo, hi = params.get("min"), params.get("max")
        if lo is None and hi is None:
            raise ValueError(f"constraint {kind.name} needs 'min' and/or 'max'")
        for bound in (lo, hi):
            if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool) or bound < 0):
                raise ValueError(f"constraint {kind.name}: min/max must be non-negative integers")
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"constraint {kind.name}: min {lo} > max {hi}")
    if "words" in kind.required and not (isinstance(params["words"], list) and params["words"]
                                         and all(isinstance(w, str) and w.strip() for w in params["words"])):
        raise ValueError(f"constraint {kind.name}: 'words' must be a non-empty list of strings")
    return kind


def check(constraint: Params, text: str) -> Result:
    """Whether ``text`` satisfies the constraint; an empty response satisfies none."""
    kind = validate(constraint)
    if not text.strip():
        return False, "empty response"
    return kind.check(text, kind.params(constraint))


def describe(constraint: Params) -> str:
    kind = validate(constraint)
    return kind.describe(kind.params(constraint))
