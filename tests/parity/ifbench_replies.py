"""The replies and made rows of ``test_nemo_parity_ifeval.py``: per IFBench instruction id, the right answer,
near misses and forms where IFBench and Palaestra read a reply differently. Read by file path
(``runpy.run_path``), like ``nemo_replies.py``: the test folders are no packages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from palaestra.envs.ifeval.nemo_ids import PERSON_NAMES

# ---- replies, per instruction id ---------------------------------------------------------------------------

def _keywords_multiple(kw: dict[str, Any]) -> dict[str, str]:
    keys = [str(kw[f"keyword{i}"]) for i in range(1, 6)]
    counts = [1, 2, 3, 5, 7]

    def text(words: list[list[str]]) -> str:
        return " ".join(f"Here {' and '.join(ws)} appear." for ws in words if ws)

    gold = [[k] * n for k, n in zip(keys, counts, strict=True)]
    return {
        "gold": text(gold),
        "gold_capitalised": text([[k.capitalize()] * n for k, n in zip(keys, counts, strict=True)]),
        "last_one_short": text([*gold[:4], [keys[4]] * 6]),
        "first_one_over": text([[keys[0]] * 2, *gold[1:]]),
        "first_missing": text(gold[1:]),
        "plural": text([*gold[:2], [keys[2] + "s", keys[2], keys[2]], *gold[3:]]),
        "inside_longer_word": text(gold) + f" Such {keys[4]}ical talk.",
    }


def _stairs(lines: list[str], unit: str = "  ", start: int = 0) -> str:
    return "\n".join(f"{unit * (start + i)}{line}" for i, line in enumerate(lines))


_STAIRS = ["INT. LUNAR MODULE - NIGHT", "The panel goes dark.", "ALDRIN looks at ARMSTRONG.", "Silence.",
           "FADE OUT."]


def _line_indent(kw: dict[str, Any]) -> dict[str, str]:
    gold = _stairs(_STAIRS)
    lines = gold.split("\n")
    return {
        "gold": gold,
        "gold_indented_from_the_start": _stairs(_STAIRS, start=1),
        "gold_trailing_newline": gold + "\n",
        "one_blank_line_between": "\n".join([*lines[:2], "", *lines[2:]]),
        "blank_line_of_spaces": "\n".join([*lines[:2], "      ", *lines[2:]]),
        "two_blank_lines_between": "\n".join([*lines[:2], "", "", *lines[2:]]),
        "tabs": _stairs(_STAIRS, unit="\t"),
        "single_line": _STAIRS[0],
        "same_indent_twice": "\n".join([*lines[:2], "  " + lines[2].lstrip(), *lines[3:]]),
        "decreasing": "\n".join(reversed(lines)),
        "no_indent": "\n".join(_STAIRS),
    }


def _person_names(kw: dict[str, Any]) -> dict[str, str]:
    n = int(kw["N"])
    names = list(PERSON_NAMES[:n])

    def text(ns: list[str]) -> str:
        return "At the gala " + ", ".join(ns) + " all spoke."

    return {
        "gold": text(names),
        "all_fifty": text(list(PERSON_NAMES)),
        "one_short": text(names[:-1]),
        "one_repeated": text([*names[:-1], names[0]]),
        "one_in_lower_case": text([*names[:-1], names[-1].lower()]),
        "one_possessive": text([*names[:-1], names[-1] + "'s friend"]),
        "one_inside_a_longer_word": text([*names[:-1], names[-1] + "son" + "ville"]),
    }


def _stop_words(kw: dict[str, Any]) -> dict[str, str]:
    return {"gold": "Use os.path.basename(filepath): returns filename, dropping directories.",
            "mostly_stop_words": "It is what it is and that is all there is to it."}


def _start_verb(kw: dict[str, Any]) -> dict[str, str]:
    return {"gold": "Imagine neon towers over Manhattan.", "noun_first": "Neon towers rise over Manhattan."}


def _words(n: int) -> str:
    return " ".join(f"w{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(n))  # n different plain words


def _word_count_range(kw: dict[str, Any]) -> dict[str, str]:
    lo, hi = int(kw["min_words"]), int(kw["max_words"])
    return {"gold": _words((lo + hi) // 2), "at_min": _words(lo), "at_max": _words(hi), "one_over": _words(hi + 1),
            "one_under": _words(lo - 1), "contraction_at_the_edge": _words(hi - 1) + " don't",
            "hyphenated_at_the_edge": _words(hi - 1) + " state-of-the-art"}


def _unique_word_count(kw: dict[str, Any]) -> dict[str, str]:
    n = int(kw["N"])
    return {"gold": _words(n) + ".", "one_short": _words(n - 1) + " wab wab.",
            "repeat_in_other_case": _words(n - 1) + " WAA.", "punctuation_attached": _words(n) + ", waa, wba!",
            "dash_token": _words(n - 1) + " - ."}


def _conjunctions(kw: dict[str, Any]) -> dict[str, str]:
    return {"gold": "Tea and cake, but no jam, or bread.", "two_only": "Tea and cake, but no jam.",
            "same_twice_in_two_cases": "And tea and cake, but no jam.",
            "same_twice_with_a_comma": "Tea and, then cake and bread, but no jam.",
            "inside_longer_words": "A band, an organ, a sofa and a nora bust."}


def _numbers(kw: dict[str, Any]) -> dict[str, str]:
    return {"gold": "I have 3 cats, 12 fish and 7 birds.", "decimal": "Pi is 3.14, then 2 and 5.",
            "thousands": "About 1,000 people, 2 dogs and 5 cats.", "one_over": "3 cats, 12 fish, 7 birds, 1 dog.",
            "one_under": "3 cats and 12 fish.", "a_range": "Read pages 10-12 and chapter 5.",
            "in_words": "Three cats, twelve fish and seven birds."}


def _no_whitespace(kw: dict[str, Any]) -> dict[str, str]:
    return {"gold": "No_spaces_here.", "one_space": "No spaces_here.", "newline": "No\nspaces",
            "tab": "No\tspaces", "no_break_space": "No\u00a0spaces", "trailing_newline": "No_spaces_here.\n"}


def _palindrome(kw: dict[str, Any]) -> dict[str, str]:
    ten = "level radar civic kayak refer rotor madam stats tenet racecar"
    return {"gold": f"We saw {ten}.", "gold_capitalised": f"We saw {ten.title()}.",
            "nine": "We saw level radar civic kayak refer rotor madam stats tenet.",
            "one_ten_times": "We saw " + "level " * 10 + "today.", "short_ones": "Mom, dad, bob, eve, wow, pop."}


def _newline(kw: dict[str, Any]) -> dict[str, str]:
    return {"gold": "Each\nword\nalone.", "two_on_a_line": "Each word\nalone.",
            "blank_lines_between": "Each\n\nword\n\nalone.", "punctuation_alone": "Each\nword\n-\nalone.",
            "indented": "Each\n  word\n    alone.", "one_word": "Alone."}


def _repeats(kw: dict[str, Any]) -> dict[str, str]:
    n = int(kw["small_n"])
    return {"gold": "tea " * n + "and cake.", "one_over": "tea " * (n + 1) + "and cake.",
            "other_case": "Tea " + "tea " * n + "and cake.", "with_punctuation": "tea, " * (n + 1) + "and cake."}


def _prime_lengths(kw: dict[str, Any]) -> dict[str, str]:
    return {"gold": "We ate hot bread at seven.", "one_of_four": "We ate good bread.",
            "one_letter": "I ate hot bread.", "contraction": "We don't eat.", "number": "We ate 1234 buns."}


def _no_consecutive(kw: dict[str, Any]) -> dict[str, str]:
    return {"gold": "Tea and cake make everyone happy.", "two_in_a_row": "Tea time is over.",
            "case_differs": "Tea tastes nice.", "across_punctuation": "Tea. Time is up.",
            "one_word": "Tea."}


REPLIES: dict[str, Callable[[dict[str, Any]], dict[str, str]]] = {
    "count:keywords_multiple": _keywords_multiple, "format:line_indent": _line_indent,
    "count:person_names": _person_names, "ratio:stop_words": _stop_words, "words:start_verb": _start_verb,
    "count:word_count_range": _word_count_range, "count:unique_word_count": _unique_word_count,
    "count:conjunctions": _conjunctions, "count:numbers": _numbers, "format:no_whitespace": _no_whitespace,
    "words:palindrome": _palindrome, "format:newline": _newline, "words:repeats": _repeats,
    "words:prime_lengths": _prime_lengths, "words:no_consecutive": _no_consecutive,
}
# IFBench ids that no published example row uses: a row each, worded as IFBench words the instruction.
MADE_ROWS: list[tuple[str, dict[str, Any], str]] = [
    ("count:word_count_range", {"min_words": 20, "max_words": 30},
     "The response must contain between 20 and 30 words."),
    ("count:unique_word_count", {"N": 10}, "Use at least 10 unique words in the response."),
    ("count:conjunctions", {"small_n": 3}, "Use at least 3 different coordinating conjunctions in the response."),
    ("count:numbers", {"N": 3}, "Include exactly 3 numbers in the response."),
    ("format:no_whitespace", {}, "The output should not contain any whitespace."),
    ("words:palindrome", {}, "Include at least 10 single-word palindromes, each at least 5 characters long."),
    ("format:newline", {}, "Write each word on a new line."),
    ("words:repeats", {"small_n": 3}, "The response should not repeat any word more than 3 times."),
    ("words:prime_lengths", {}, "Use only words with lengths that are prime numbers."),
    ("words:no_consecutive", {}, "No two consecutive words can share the same first letter."),
]
MALFORMED = {"empty": "", "whitespace": "  \n\t "}
