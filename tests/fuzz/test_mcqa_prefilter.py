"""mcqa's answer search skips a pattern when a reply holds none of the words it needs
(``extract._may_match``). Skipping must never change what is extracted: the same replies, read with
every pattern run, give the same ``Extraction``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palaestra.envs.mcqa import extract as ex

OPTIONS = [("A", "Paris"), ("B", "Vitamin C"), ("C", "H₂O"), ("D", "it is so")]

# Pieces of replies: the patterns' words in every case, answer shapes, letters, and the non-ASCII
# characters that re.IGNORECASE folds to ASCII ones (the long s, the Kelvin sign, dotted and dotless I).
PIECES = st.sampled_from([
    "Answer: ", "answer is ", "ANSWER", "The final answer is ", "<answer>", "</answer>", "<ANSWER>", "it's ",
    "It is ", "I choose ", "I'll go with ", "going with ", "my pick is ", "option ", "Choice ", "so ", "So, ",
    "therefore ", "Hence ", "thus ", " is correct", " is the right one", "is ", "A", "B", "C", "D", "E", "b",
    "\\boxed{", "}", "**", "(", ")", ".", "\n", " ", "Paris", "Vitamin C", "H2O", "H₂O", "ſo ", "\u212a",
    "\u0130t ", "\u0131t ", "Actually ", "wait, ", " or ", "not ",
])


@settings(max_examples=500, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=14).map("".join))
def test_skipping_patterns_never_changes_the_extraction(text: str) -> None:
    fast = ex.extract(text, OPTIONS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ex, "_may_match", lambda _text: (True, True, True, True))
        full = ex.extract(text, OPTIONS)
    assert fast == full, text
