from __future__ import annotations

import pytest

from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task, Trajectory
from palaestra.envs.ifeval import constraints as C
from palaestra.envs.ifeval.env import IFEval


def _task(constraints: list[dict], **meta: object) -> Task:
    return Task(id="t", env="ifeval", input="Write something.", metadata={"constraints": constraints, **meta})


def test_bundled_tasks_cover_every_kind_and_their_references_pass() -> None:
    env = IFEval()
    tasks = env.examples()
    assert len(tasks) >= 20
    assert len(C.KINDS) >= 20
    used = {c["kind"] for t in tasks for c in t.metadata["constraints"]}
    assert used == set(C.KINDS)
    for task in tasks:
        ref = env.reference(task)
        assert ref is not None and ref.final_answer
        verdict = env.verify(task, Trajectory(final_answer=ref.final_answer))
        assert verdict.reward == 1.0 and verdict.passed, (task.id, verdict.metadata)
        empty = env.verify(task, Trajectory(final_answer=""))
        assert empty.reward == 0.0 and not empty.passed


@pytest.mark.parametrize(("constraint", "good", "bad"), [
    ({"kind": "word_count", "min": 3, "max": 4}, "one two three", "one two"),
    ({"kind": "sentence_count", "min": 2, "max": 2}, "It rains. We stay in!", "It rains."),
    ({"kind": "paragraph_count", "min": 2, "max": 2}, "first part\n\nsecond part", "first part\nsame part"),
    ({"kind": "char_count", "max": 5}, "short", "longer text"),
    ({"kind": "keyword_frequency", "word": "cat", "min": 2}, "Cat and cat.", "cat and category"),
    ({"kind": "letter_frequency", "letter": "z", "max": 0}, "plain words", "a zebra"),
    ({"kind": "bullet_count", "min": 2, "max": 2}, "* a\n- b", "* a\nb"),
    ({"kind": "numbered_list", "min": 2}, "1. a\n2) b", "1. a\nb"),
    ({"kind": "sections", "min": 2, "max": 2}, "SECTION 1\na\nSECTION 2\nb", "SECTION 1\na"),
    ({"kind": "markdown_headings", "min": 1}, "# Title\ntext", "Title\ntext"),
    ({"kind": "highlighted", "min": 2}, "*one* and **two**", "*one* only"),
    ({"kind": "capital_words", "min": 2}, "VERY LOUD", "I am Quiet"),
    ({"kind": "placeholders", "min": 2}, "[name] at [place]", "[name] only"),
    ({"kind": "keywords", "words": ["red", "big dog"]}, "A big  dog is red.", "A big cat is red."),
    ({"kind": "forbidden_words", "words": ["very"]}, "Everyone is happy.", "It is Very good."),
    ({"kind": "json_format"}, '```json\n{"a": 1}\n```', "{'a': 1}"),
    ({"kind": "markdown_title"}, "<<Hello>>\nbody", "Hello\nbody"),
    ({"kind": "lowercase"}, "all small", "Not all small"),
    ({"kind": "uppercase"}, "ALL BIG 123", "ALL BIG but one"),
    ({"kind": "starts_with", "phrase": "Dear Sir"}, "  dear sir, hello", "Hello, dear sir"),
    ({"kind": "ends_with", "phrase": "Anything else?"}, "Done. Anything else?  ", "Anything else? Bye"),
    ({"kind": "quotation"}, '"quoted"', 'said "quoted"'),
    ({"kind": "postscript"}, "Body.\n\nP.S. more", "P.S. only"),
    ({"kind": "no_commas"}, "no commas here", "one, two"),
    ({"kind": "no_digits"}, "seven", "7"),
    ({"kind": "two_responses"}, "A\n******\nB", "A\n******\nA"),
    ({"kind": "repeat_prompt", "text": "Say hi."}, "Say  hi. Hi!", "Hi! Say hi."),
    ({"kind": "ends_with_question"}, "Ready?", "Ready."),
])
def test_each_kind_tells_compliant_from_non_compliant(constraint: dict, good: str, bad: str) -> None:
    assert C.check(constraint, good)[0], C.check(constraint, good)
    assert not C.check(constraint, bad)[0]
    assert not C.check(constraint, "   ")[0]
    assert C.describe(constraint)


def test_reward_is_the_fraction_met_and_passed_is_strict() -> None:
    env = IFEval()
    task = _task([{"kind": "lowercase"}, {"kind": "no_commas"}, {"kind": "word_count", "max": 3},
                  {"kind": "keywords", "words": ["tea"]}])
    none = env.verify(task, Trajectory(final_answer="I like coffee, really"))
    assert none.reward == 0.0 and none.passed is False
    half = env.verify(task, Trajectory(final_answer="i like tea, really"))
    assert half.reward == 0.5 and half.passed is False
    assert half.components == {"1.lowercase": 1.0, "2.no_commas": 0.0, "3.word_count": 0.0, "4.keywords": 1.0}
    assert half.metadata["failed"] == {"2.no_commas": "1 comma(s)", "3.word_count": "4 words"}
    most = env.verify(task, Trajectory(final_answer="Tea please"))
    assert most.reward == 0.75 and most.passed is False
    assert env.verify(task, Trajectory(final_answer="tea please")).passed


def test_final_text_falls_back_to_the_last_assistant_message() -> None:
    env = IFEval()
    task = _task([{"kind": "uppercase"}])
    traj = Trajectory(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "SHOUT"}])
    assert env.verify(task, traj).passed


@pytest.mark.parametrize(("constraint", "fragment"), [
    ({"kind": "no_such_kind"}, "unknown constraint kind"),
    ({"kind": "word_count"}, "needs 'min' and/or 'max'"),
    ({"kind": "word_count", "min": 5, "max": 2}, "min 5 > max 2"),
    ({"kind": "keywords", "words": []}, "non-empty list"),
    ({"kind": "no_commas", "extra": 1}, "unknown ['extra']"),
    ({"kind": "starts_with"}, "missing ['phrase']"),
])
def test_bad_constraints_are_rejected_with_the_reason(constraint: dict, fragment: str) -> None:
    with pytest.raises(InvalidTask) as err:
        IFEval().check_task(_task([constraint]))
    assert fragment in str(err.value) and "constraints[0]" in str(err.value)


def test_prompt_states_the_constraints_unless_the_input_already_does() -> None:
    env = IFEval()
    task = _task([{"kind": "word_count", "min": 2, "max": 2}, {"kind": "ends_with", "phrase": "Bye."}])
    content = env.prompt(task)[-1]["content"]
    assert content.startswith("Write something.\n\nRequirements:\n")
    assert "exactly 2 words" in content and '"Bye."' in content
    inline = _task([{"kind": "no_commas"}], instructions_in_prompt=True)
    assert env.prompt(inline)[-1]["content"] == "Write something."
