"""A reply that meets a row's constraints, for the oracle of rows that carry no reference answer.

NeMo Gym's instruction-following rows state constraints only; ``env check`` and ``scripted:oracle`` still
need a reply that passes them. This composes one from the constraints' parameters: paragraphs of
sentences built from made-up capitalised words (distinct, so no word repeats, none is a stop word, and
none collides with a forbidden or counted keyword), then the parts each constraint asks for (title,
bullets, placeholders, keywords, first and last words, indentation...). The result is kept only when
every constraint's own check accepts it, so a combination this cannot satisfy gives no reference (and
the oracle no answer) rather than a wrong one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

from palaestra.envs.ifeval import constraints as C

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")


def _made_up_words() -> Iterator[str]:
    """Kabo, Kade, ... : capitalised nonsense words, each produced once."""
    for n in itertools.count(2):
        for parts in itertools.product(*[[o + v for o in _ONSETS for v in _VOWELS]] * n):
            yield "".join(parts).capitalize()


def _relation_count(p: dict[str, Any], key: str, rel: str = "relation") -> tuple[int | None, int | None]:
    """(at least, fewer than) from a NeMo Gym ``num``/``relation`` pair."""
    n = p.get(key)
    if n is None:
        return None, None
    n = math.ceil(float(n))
    return (n, None) if str(p.get(rel) or "at least") == "at least" else (None, n)


def compose(constraints: list[dict[str, Any]], prompt: str = "") -> str | None:
    """A reply meeting every constraint, or None when this cannot build one."""
    words = _made_up_words()
    kinds = {c.get("kind"): c for c in constraints}
    n_par, divider = 1, "\n\n"
    first_of_par: dict[int, str] = {}
    for kind, c in kinds.items():
        if kind == "length_constraints:number_paragraphs":
            n_par, divider = int(c["num_paragraphs"]), "\n***\n"
        elif kind == "paragraphs:paragraphs":
            n_par, divider = 2, "\n***\n"
        elif kind == "length_constraints:nth_paragraph_first_word":
            n_par = int(c["num_paragraphs"])
            first_of_par[int(c["nth_paragraph"])] = str(c["first_word"])
        elif kind == "paragraph_count":
            n_par = int(c.get("min") or c.get("max") or 1)
    sentence_first = next((str(c["first_word"]) for k, c in kinds.items() if k == "first_word:first_word_sent"), None)
    min_sent, max_sent = _relation_count(kinds.get("length_constraints:number_sentences", {}), "num_sentences")
    min_words, max_words = _relation_count(kinds.get("length_constraints:number_words", {}), "num_words")
    per_par = max(1, math.ceil((min_sent or 1) / n_par), 3 if "format:line_indent" in kinds else 1)
    words_per_sentence = 3
    if min_words:
        words_per_sentence = max(3, math.ceil(min_words / (per_par * n_par)) + 1)
    if max_sent is not None and per_par * n_par >= max_sent:
        return None

    extras: list[str] = []  # words placed into the first sentence
    lines_after: list[str] = []  # lines added to the end of the last paragraph
    for kind, c in kinds.items():
        if kind in ("detectable_format:title", "markdown_title"):
            extras.append(f"<<{next(words)} {next(words)}>>")
        elif kind == "detectable_content:number_placeholders":
            extras += [f"[{next(words)}]" for _ in range(int(c["num_placeholders"]))]
        elif kind == "placeholders":
            extras += [f"[{next(words)}]" for _ in range(int(c.get("min") or 0))]
        elif kind == "detectable_format:number_highlighted_sections":
            extras += [f"*{next(words)}*" for _ in range(int(c["num_highlights"]))]
        elif kind == "keywords:existence":
            extras += [str(w) for w in c["keywords"]]
        elif kind == "keywords:frequency":
            least, _ = _relation_count(c, "frequency")
            extras += [str(c["keyword"])] * (least or 0)
        elif kind == "count:keywords_multiple":
            for key, times in (("keyword1", 1), ("keyword2", 2), ("keyword3", 3), ("keyword4", 5), ("keyword5", 7)):
                if key in c:
                    extras += [str(c[key])] * times
        elif kind == "change_case:capital_word_frequency":
            least, _ = _relation_count(c, "capital_frequency", "capital_relation")
            extras += [next(words).upper() for _ in range(least or 0)]
        elif kind == "detectable_format:number_bullet_lists":
            lines_after += [f"* {next(words)} {next(words)}." for _ in range(int(c["num_bullets"]))]
        elif kind == "bullet_count":
            lines_after += [f"* {next(words)} {next(words)}." for _ in range(int(c.get("min") or 0))]
        elif kind == "detectable_content:postscript":
            lines_after.append(f"{c.get('postscript_marker') or 'P.S.'} {next(words)}.")

    paragraphs = []
    for i in range(1, n_par + 1):
        sentences = []
        for j in range(per_par):
            body = [next(words) for _ in range(words_per_sentence)]
            lead = first_of_par.get(i) if j == 0 else None
            lead = lead or sentence_first
            if lead:
                body[0] = lead
            if i == 1 and j == 0:
                body[1:1] = extras
            sentences.append(" ".join(body) + ".")
        paragraphs.append(" ".join(sentences))
    if lines_after:
        paragraphs[-1] += "\n" + "\n".join(lines_after)
    text = divider.join(paragraphs)
    last = kinds.get("last_word:last_word_answer")
    if last:
        text = text.rstrip(".") + f" {last['last_word']}."
    end = kinds.get("startend:end_checker")
    if end:
        text = f"{text} {end['end_phrase']}"
    if "format:line_indent" in kinds:
        lines = [ln for ln in text.replace(". ", ".\n").split("\n") if ln.strip()]
        text = "\n".join(" " * i + ln.strip() for i, ln in enumerate(lines))
    if "change_case:english_lowercase" in kinds or "lowercase" in kinds:
        text = text.lower()
    if "change_case:english_capital" in kinds or "uppercase" in kinds:
        text = text.upper()
    if "detectable_format:constrained_response" in kinds:
        text = f"{text}\nMy answer is yes."
    if "combination:repeat_prompt" in kinds:
        text = f"{kinds['combination:repeat_prompt']['prompt_to_repeat']} {text}"
    if "startend:quotation" in kinds or "quotation" in kinds:
        text = f'"{text}"'
    try:
        return text if all(C.check(c, text)[0] for c in constraints) else None
    except ValueError:  # a constraint this module does not know: no reference, never a guess
        return None
