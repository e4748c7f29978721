"""More IFBench instruction ids as ifeval constraint kinds: counts and forms a program can check without a
language model (IFBench's checks of these need none of NLTK's data either, so their parity is measured:
``tests/parity/test_nemo_parity_ifeval.py``).

As in ``nemo_ids.py``, each check is written from the instruction's published wording (the sentence the id
adds to the prompt), and ``nemo_compat`` readings (``nemo_ids.COMPAT``) reproduce IFBench's where it reads
a reply otherwise. Importing this module registers the kinds.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable

from palaestra.envs.ifeval import constraints as C
from palaestra.envs.ifeval import nemo_ids
from palaestra.envs.ifeval.constraints import Kind, Params, Result

_CONJUNCTIONS = frozenset({"and", "but", "for", "nor", "or", "so", "yet"})
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def _word_count_range(text: str, p: Params) -> Result:
    # "The response must contain between {min_words} and {max_words} words."
    n = len(C.words(text))
    return int(p["min_words"]) <= n <= int(p["max_words"]), f"{n} words"


def _unique_words(text: str, p: Params) -> Result:
    # "Use at least {N} unique words in the response."
    n = len({w.lower() for w in C.words(text)})
    return n >= int(p["N"]), f"{n} unique words"


def _conjunctions(text: str, p: Params) -> Result:
    # "Use at least {small_n} different coordinating conjunctions in the response."
    used = {w.lower() for w in C.words(text)} & _CONJUNCTIONS
    return len(used) >= int(p["small_n"]), f"{len(used)} different: {sorted(used)}"


def _numbers(text: str, p: Params) -> Result:
    # "Include exactly {N} numbers in the response." A number is a run of digits, with decimal or thousands
    # separators inside it (3.14 and 1,000 are one number each).
    n = len(_NUMBER.findall(text))
    return n == int(p["N"]), f"{n} numbers"


def _no_whitespace(text: str, p: Params) -> Result:
    # "The output should not contain any whitespace."
    n = sum(1 for c in text if c.isspace())
    return n == 0, f"{n} whitespace characters"


def _palindromes(text: str, p: Params) -> Result:
    # "Include at least 10 single-word palindromes, each at least 5 characters long." Different ones.
    found = {w.lower() for w in C.words(text) if len(w) >= 5 and w.lower() == w.lower()[::-1]}
    return len(found) >= 10, f"{len(found)} different palindromes of 5+ letters"


def _word_per_line(text: str, p: Params) -> Result:
    # "Write each word on a new line."
    crowded = [ln for ln in text.split("\n") if len(C.words(ln)) > 1]
    return not crowded, f"{len(crowded)} line(s) with more than one word"


def _repeats(text: str, p: Params) -> Result:
    # "The response should not repeat any word more than {small_n} times."
    counts = Counter(w.lower() for w in C.words(text))
    word, n = counts.most_common(1)[0] if counts else ("", 0)
    return n <= int(p["small_n"]), f"{word!r} {n} times"


def _prime_lengths(text: str, p: Params) -> Result:
    # "Use only words with lengths that are prime numbers."
    # A word's length is its letters and digits: "don't" has 4.
    bad = [w for w in C.words(text) if not _prime(sum(c.isalnum() for c in w))]
    return not bad, f"not prime: {bad[:5]}" if bad else "every word has a prime length"


def _no_consecutive(text: str, p: Params) -> Result:
    # "No two consecutive words can share the same first letter."
    ws = [w.lower() for w in C.words(text)]
    pairs = [f"{a} {b}" for a, b in zip(ws, ws[1:], strict=False) if a[0] == b[0]]
    return not pairs, f"{pairs[:3]}" if pairs else "no two in a row"


def _kind(name: str, check: Callable[[str, Params], Result], say: str, required: tuple[str, ...] = ()) -> Kind:
    return Kind(name, check, lambda p: say.format(**{k: p.get(k) for k in required}), required)


IFBENCH_KINDS: dict[str, Kind] = {k.name: k for k in (
    _kind("count:word_count_range", _word_count_range, "Use between {min_words} and {max_words} words.",
          ("min_words", "max_words")),
    _kind("count:unique_word_count", _unique_words, "Use at least {N} unique words.", ("N",)),
    _kind("count:conjunctions", _conjunctions, "Use at least {small_n} different coordinating conjunctions.",
          ("small_n",)),
    _kind("count:numbers", _numbers, "Include exactly {N} numbers.", ("N",)),
    _kind("format:no_whitespace", _no_whitespace, "Use no whitespace at all."),
    _kind("words:palindrome", _palindromes, "Include at least 10 palindromes of 5 or more letters."),
    _kind("format:newline", _word_per_line, "Write each word on a new line."),
    _kind("words:repeats", _repeats, "Use no word more than {small_n} times.", ("small_n",)),
    _kind("words:prime_lengths", _prime_lengths, "Use only words whose length is a prime number."),
    _kind("words:no_consecutive", _no_consecutive, "No two words in a row may start with the same letter."),
)}
C.EXTRA_KINDS.update(IFBENCH_KINDS)


# ---- nemo_compat: IFBench's readings where they differ ---------------------------------------------------

def _ifbench_tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text)  # IFBench's word count: runs of word characters ("don't" is two)


def _compat_word_count_range(text: str, p: Params) -> Result:
    n = len(_ifbench_tokens(text))
    return int(p["min_words"]) <= n <= int(p["max_words"]), f"{n} words (runs of word characters)"


def _compat_unique_words(text: str, p: Params) -> Result:
    # Whitespace-separated, lower-cased, ASCII punctuation stripped from both ends; a token of punctuation
    # alone (a dash) leaves the empty string, which counts as one more "word".
    n = len({w.strip(string.punctuation + " ") for w in text.lower().split()})
    return n >= int(p["N"]), f"{n} unique tokens"


def _compat_conjunctions(text: str, p: Params) -> Result:
    # IFBench finds the conjunctions among whitespace-separated tokens (punctuation stripped, any case) but
    # counts the different tokens as written: "And" and "and", or "and," and "and", are two.
    used = {w for w in text.split() if w.strip(string.punctuation + " ").lower() in _CONJUNCTIONS}
    return len(used) >= int(p["small_n"]), f"{len(used)} different tokens"


def _compat_numbers(text: str, p: Params) -> Result:
    # IFBench deletes all ASCII punctuation first, so "2-3" and "10/12" are one number each.
    n = len(re.findall(r"\d+", text.translate(_NO_PUNCTUATION)))
    return n == int(p["N"]), f"{n} numbers (punctuation removed first)"


def _ifbench_words(text: str, lower: bool = True) -> list[str]:
    # IFBench's reading of words for these ids: ASCII punctuation deleted, then split at whitespace.
    return (text.lower() if lower else text).translate(_NO_PUNCTUATION).split()


def _compat_palindromes(text: str, p: Params) -> Result:
    # IFBench counts occurrences: one palindrome written ten times is ten.
    n = sum(1 for w in _ifbench_words(text) if len(w) >= 5 and w == w[::-1])
    return n >= 10, f"{n} palindromes of 5+ characters (occurrences)"


def _compat_prime_lengths(text: str, p: Params) -> Result:
    bad = [w for w in _ifbench_words(text, lower=False) if not _prime(len(w))]
    return not bad, f"not prime: {bad[:5]}" if bad else "every word has a prime length"


def _compat_word_per_line(text: str, p: Params) -> Result:
    # As many non-empty lines as whitespace-separated tokens, once punctuation is deleted.
    stripped = text.translate(_NO_PUNCTUATION).strip()
    lines = [ln for ln in stripped.split("\n") if ln != ""]
    return len(lines) == len(stripped.split()), f"{len(lines)} lines, {len(stripped.split())} words"


def _compat_repeats(text: str, p: Params) -> Result:
    counts = Counter(_ifbench_words(text))
    word, n = counts.most_common(1)[0] if counts else ("", 0)
    return n <= int(p["small_n"]), f"{word!r} {n} times"


def _compat_no_consecutive(text: str, p: Params) -> Result:
    ws = _ifbench_words(text)
    ok = all(a[0] != b[0] for a, b in zip(ws, ws[1:], strict=False))
    return ok, "no two in a row" if ok else "two words in a row share a first letter"


nemo_ids.COMPAT.update({
    "words:palindrome": _compat_palindromes,
    "words:prime_lengths": _compat_prime_lengths,
    "format:newline": _compat_word_per_line,
    "words:repeats": _compat_repeats,
    "words:no_consecutive": _compat_no_consecutive,
    "count:word_count_range": _compat_word_count_range,
    "count:unique_word_count": _compat_unique_words,
    "count:conjunctions": _compat_conjunctions,
    "count:numbers": _compat_numbers,
})
