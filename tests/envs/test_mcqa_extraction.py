"""Hostile reply shapes for the mcqa extractor: only a committed answer counts, a reply naming several
options is ``ambiguous`` (reward 0), and ordinary correct replies stay correct."""

from __future__ import annotations

import pytest

from palaestra.core.records import Task, Trajectory
from palaestra.envs.mcqa.env import MCQA
from palaestra.envs.mcqa.extract import extract
from palaestra.envs.mcqa.reading import AMBIGUOUS, find_boxed, normalize_options

OPTIONS = normalize_options([{"A": "Oxygen"}, {"B": "Nitrogen"}, {"C": "Carbon dioxide"}, {"D": "Argon"}])
VITAMINS = normalize_options(["Vitamin A", "Vitamin C", "Vitamin D", "Iron"])

# reply text -> the committed letter, AMBIGUOUS, or None (no committed answer)
HOSTILE: list[tuple[str, str | None]] = [
    ("(B) and (C) are both plausible", AMBIGUOUS),
    ("The answer is B. Actually C.", AMBIGUOUS),
    ("The answer is B. Wait, no, it's D.", "D"),  # a later committed answer wins
    ("\\boxed{C: Carbon dioxide}", "C"),
    ("\\boxed{C) text}", "C"),
    ("\\boxed{\\text{C}}", "C"),
    ("\\boxed{\\textbf{(C)}}", "C"),
    ("\\boxed{c}", "C"),
    ("\\boxed{B, C}", AMBIGUOUS),
    ("\\boxed{B \\text{ and } C}", AMBIGUOUS),
    ("\\boxed{A} then on reflection \\boxed{D}", "D"),
    ("answer: c", "C"),
    ("Answer: A\n\nLet me double-check the numbers.\n\nAnswer: B", "B"),
    ("Answer: A or B", AMBIGUOUS),
    ("Answer: B/C", AMBIGUOUS),
    ("<answer>A or C</answer>", AMBIGUOUS),
    ("I think A or B", AMBIGUOUS),
    ("Hmm, A or D? I'll go with D.", "D"),
    ("**B**", "B"),
    ("I'd go with **B** here.", "B"),
    ("**A** looks tempting, but **C** fits better", AMBIGUOUS),
    ("**A** is wrong; the answer is **B**.", "B"),
    ("B", "B"),
    ("b", "B"),
    ("  (D).  ", "D"),
    ("Options: A) Oxygen B) Nitrogen C) Carbon dioxide D) Argon. The answer is B.", "B"),
    ("(A) Oxygen\n(B) Nitrogen\n(C) Carbon dioxide\n(D) Argon", AMBIGUOUS),
    ("A\nB\nC\nD", AMBIGUOUS),
    ("Oxygen\nNitrogen", AMBIGUOUS),
    # The reply seen on the local model: letters named while reasoning, then two of them at once.
    ("Consider amines (B) as candidates, and (C) too. On reflection B and C are correct.", AMBIGUOUS),
    ("(A) is wrong because oxygen is 21%. (C) is a trace gas.", AMBIGUOUS),
    ("Oxygen (A) is a reactive gas that we breathe.", None),
    ("A nitrogen molecule is the most common, so the answer is B.", "B"),
    ("The answer is not A.", None),
    ("Answer: B (not C)", "B"),
    ("The answer is B.\nNo, C is wrong too.", "B"),
    ("Answer: B\n\nOr perhaps C?", AMBIGUOUS),
    ("The answer is B, or maybe C", AMBIGUOUS),
    ("Answer: B\nWait, A is 21%, so B stands.", "B"),  # checking an option after answering is no revision
    ("Answer: B\n\nNo. A nitrogen molecule is N2.", "B"),
    ("A is wrong, C is wrong, so B.", "B"),
    ("B is correct.", "B"),
    ("Option B is the correct answer.", "B"),
    ("It's B.", "B"),
    ("I choose B", "B"),
    ("**Answer: B**", "B"),
    ("Answer: $\\boxed{B}$", "B"),
    ("Answer: **B) Nitrogen**", "B"),
    ("The correct answer: (B)", "B"),
    ("Final answer: B. A quick sanity check: nitrogen is 78% of air.", "B"),
    ("(A) is wrong and (C) is wrong. Answer: B. Note (D) is also wrong.", "B"),
    ("The answer is Nitrogen, since it is 78% of air.", "B"),
    ("The answer is a bit unclear to me.", None),
    ("I do not know.", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "want"), HOSTILE)
def test_hostile_reply_shapes(text: str, want: str | None) -> None:
    found = extract(text, OPTIONS)
    if want == AMBIGUOUS:
        assert found.letter is None and found.reason == AMBIGUOUS and len(found.candidates) >= 2, found
    else:
        assert found.letter == want, found
        if want is None:
            assert found.reason and found.reason != AMBIGUOUS, found


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Answer: B) Vitamin C", "B"),  # the C belongs to the restated option text
        ("\\boxed{Vitamin D}", "C"),
        ("The answer is D.", "D"),
        ("Answer: A or D", AMBIGUOUS),
    ],
)
def test_option_texts_that_contain_letters(text: str, want: str) -> None:
    found = extract(text, VITAMINS)
    assert (found.letter if want != AMBIGUOUS else found.reason) == want, found


@pytest.mark.parametrize(
    ("mode", "text", "want"),
    [
        ("strict_single_letter_boxed", "\\boxed{B, C}", AMBIGUOUS),
        ("strict_single_letter_boxed", "\\boxed{B} or maybe \\boxed{C}", "C"),
        ("lenient_boxed", "\\boxed{A or B}", AMBIGUOUS),
        ("lenient_boxed", "\\boxed{carbon dioxide}", "C"),
        ("lenient_answer_colon", "Answer: A or B", AMBIGUOUS),
        ("lenient_answer_colon", "Answer: A\nAnswer: B", "B"),
    ],
)
def test_nemo_grading_modes_report_ambiguity(mode: str, text: str, want: str) -> None:
    found = extract(text, OPTIONS, mode)
    assert (found.letter if want != AMBIGUOUS else found.reason) == want, found


def test_an_ambiguous_reply_scores_zero_and_says_why() -> None:
    env = MCQA()
    task = Task(id="t", env="mcqa", input="Which gas is most common in air?",
                metadata={"options": [{"A": "Oxygen"}, {"B": "Nitrogen"}, {"C": "CO2"}], "expected_answer": "B"})
    verdict = env.verify(task, Trajectory(final_answer="Both (B) and (C) could be right: B and C."))
    assert verdict.reward == 0.0 and not verdict.passed and verdict.answer is None
    assert verdict.metadata["reason"] == AMBIGUOUS and verdict.metadata["candidates"] == ["B", "C"]


def test_boxes_are_found_in_linear_passes_even_when_unclosed() -> None:
    text = "\\boxed{" * 50_000 + "\\boxed{B}"
    assert find_boxed(text) == [(len(text) - len("\\boxed{B}"), "B")]
    assert extract(text, OPTIONS).letter == "B"
    nested = "\\boxed{\\boxed{A} or \\boxed{C}}"
    assert [content for _, content in find_boxed(nested)] == ["\\boxed{A} or \\boxed{C}", "A", "C"]


def test_blank_out_is_the_case_blind_substitution_it_replaces() -> None:
    """``blank_out`` stands in for ``re.sub(re.escape(phrase), " ", text, flags=re.IGNORECASE)`` (which
    compiled a pattern per option of every reply): the same text for ASCII phrases, overlapping and
    repeated ones, regex metacharacters and case variants, and for Unicode, where ``re`` folds case its
    own way (the Kelvin sign is a ``k``; dotted capital I lowers to two characters)."""
    import random
    import re

    from palaestra.envs.mcqa.reading import blank_out

    ascii_ = ["a", "A", "b", "B", "k", "K", "s", "S", "i", "I", " ", ".", "*", "(", ")", "\\", "+", "?", "["]
    # folds to ASCII under re (Kelvin sign, long s, dotted and dotless I), and folds to nothing ASCII
    unicode_ = ["\u212a", "\u017f", "\u0130", "\u0131", "\u00df", "\u2082", "\u00b0", "\u03b1", "\u0391", "\u00e9"]
    rng = random.Random(7)
    cases = [("aaaa", "aa"), ("AaAa", "aA"), ("Vitamin C and vitamin c", "vitamin c"), ("a.b a*b", "a.b"),
             ("x(y)z", "(y)"), ("Kelvin \u212aelvin", "kelvin"), ("\u0130stanbul istanbul", "istanbul"),
             ("STRASSE stra\u00dfe", "strasse"), ("none here", "absent"), ("", "ab"), ("B", "NaCl"),
             ("kelvin", "\u212aelvin"), ("H2O or h2o", "H\u2082O"), ("Is it", "\u0131s"), ("sos", "\u017fo\u017f")]
    for _ in range(6000):
        text_chars = ascii_ if rng.random() < 0.5 else ascii_ + unicode_  # half the replies are plain ASCII
        text = "".join(rng.choice(text_chars) for _ in range(rng.randint(0, 14)))
        phrase = "".join(rng.choice(ascii_ + unicode_) for _ in range(rng.randint(1, 4)))
        cases.append((text, phrase))
    for text, phrase in cases:
        assert blank_out(text, phrase) == re.sub(re.escape(phrase), " ", text, flags=re.IGNORECASE), (text, phrase)


def test_only_four_non_ascii_characters_match_ascii_ones_ignoring_case() -> None:
    """``blank_out`` answers "not found" without a search when an ASCII reply meets an option holding a
    character outside ``_ASCII_FOLDS``: that rests on ``re.IGNORECASE`` matching no other non-ASCII code
    point to an ASCII character, checked here over all of Unicode (with this Python's ``re``)."""
    import re

    from palaestra.envs.mcqa.reading import _ASCII_FOLDS

    any_ascii = re.compile("[\\x00-\\x7f]", re.IGNORECASE)
    folds = {chr(cp) for cp in range(0x80, 0x110000)
             if not 0xD800 <= cp <= 0xDFFF and any_ascii.fullmatch(chr(cp))}
    assert folds == set(_ASCII_FOLDS)
    for c in folds:  # and each matches as a literal too, as re.escape(phrase) makes it
        assert any(re.fullmatch(re.escape(c), chr(a), re.IGNORECASE) for a in range(0x80))
