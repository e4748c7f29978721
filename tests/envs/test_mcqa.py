from __future__ import annotations

import pytest

from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task, Trajectory
from palaestra.envs.mcqa.env import MCQA
from palaestra.envs.mcqa.extract import extract
from palaestra.envs.mcqa.reading import normalize_options

OPTIONS = normalize_options([{"A": "Oxygen"}, {"B": "Nitrogen"}, {"C": "Carbon dioxide"}, {"D": "Argon"}])


def _task(**metadata: object) -> Task:
    meta = {"options": [{"A": "Oxygen"}, {"B": "Nitrogen"}, {"C": "Carbon dioxide"}, {"D": "Argon"}],
            "expected_answer": "B", **metadata}
    return Task(id="t", env="mcqa", input="Which gas is most common in air?", metadata=meta)


def _say(env: MCQA, task: Task, text: str) -> Trajectory:
    messages = [*env.prompt(task), {"role": "assistant", "content": text}]
    return Trajectory(messages=messages, final_answer=text)


def test_bundled_tasks_reference_scores_one_and_null_scores_zero() -> None:
    env = MCQA()
    tasks = env.examples()
    assert len(tasks) >= 20
    for task in tasks:
        env.check_task(task)
        ref = env.reference(task)
        assert ref.tool_calls == []
        verdict = env.verify(env.seed(task), _say(env, task, ref.final_answer or ""))
        assert verdict.reward == 1.0 and verdict.passed, task.id
        assert verdict.answer == task.metadata["expected_answer"]
        null = env.verify(env.seed(task), Trajectory(final_answer=""))
        assert null.reward == 0.0 and not null.passed, task.id
        assert null.metadata["reason"] == "empty_response"


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("\\boxed{B}", "B"),
        ("So \\boxed{\\text{B}} it is", "B"),
        ("Answer: B", "B"),
        ("**Answer:** B", "B"),
        ("(B)", "B"),
        ("B)", "B"),
        ("**B**", "B"),
        ("The answer is B.", "B"),
        ("The correct answer is **B**", "B"),
        ("B", "B"),
        ("answer: b", "B"),
        ("Nitrogen", "B"),
        ("The answer is Nitrogen, since it is 78% of air.", "B"),
        ("<answer> B </answer>", "B"),
        ("Final answer: option B", "B"),
        ("\\boxed{A} ... no, wait: \\boxed{B}", "B"),
        ("The answer is A. Hmm, actually the answer is B.", "B"),
        ("(A) is wrong and (C) is wrong. Answer: B. Note (D) is also wrong.", "B"),
        ("Answer: B\n\nWhy not (A)? Oxygen is only 21%.", "B"),
        ("Step 1: ...\nStep 2: ...\n\nD", "D"),
        ("The answer is a bit unclear to me.", None),
        ("I do not know.", None),
        ("", None),
    ],
)
def test_extraction_formats(text: str, letter: str | None) -> None:
    assert extract(text, OPTIONS).letter == letter


def test_extraction_ignores_letters_that_are_not_options() -> None:
    two = normalize_options(["yes", "no"])
    assert extract("Answer: C", two).letter is None
    assert extract("Answer: B", two).letter == "B"


def test_strict_mode_only_counts_a_single_boxed_letter() -> None:
    env = MCQA()
    task = _task(grading_mode="strict_single_letter_boxed")
    assert env.verify(task, _say(env, task, "Reasoning... \\boxed{B}")).reward == 1.0
    assert env.verify(task, _say(env, task, "Final: \\boxed{ [B] }")).reward == 1.0
    plain = env.verify(task, _say(env, task, "Answer: B"))
    assert plain.reward == 0.0 and plain.metadata["reason"] == "no_boxed_answer" and plain.answer is None
    text = env.verify(task, _say(env, task, "\\boxed{Nitrogen}"))
    assert text.reward == 0.0 and text.metadata["reason"] == "boxed_not_single_letter"
    # The last box is the model's final word, even when an earlier one was right.
    assert env.verify(task, _say(env, task, "\\boxed{B} or maybe \\boxed{C}")).answer == "C"


def test_lenient_modes() -> None:
    env = MCQA()
    boxed = _task(grading_mode="lenient_boxed")
    assert env.verify(boxed, _say(env, boxed, "\\boxed{nitrogen}")).reward == 1.0
    assert env.verify(boxed, _say(env, boxed, "Answer: B")).reward == 0.0
    colon = _task(grading_mode="lenient_answer_colon")
    assert env.verify(colon, _say(env, colon, "Answer: Nitrogen")).reward == 1.0
    assert env.verify(colon, _say(env, colon, "Answer: B")).reward == 1.0
    assert env.verify(colon, _say(env, colon, "\\boxed{B}")).metadata["reason"] == "no_answer_colon"


def test_wrong_answer_is_reported_with_the_extracted_letter() -> None:
    env = MCQA()
    task = _task()
    verdict = env.verify(task, _say(env, task, "\\boxed{C}"))
    assert (verdict.reward, verdict.answer, verdict.metadata["reason"]) == (0.0, "C", "wrong_option")


def test_final_answer_falls_back_to_last_assistant_message() -> None:
    env = MCQA()
    task = _task()
    messages: list[dict[str, object]] = [{"role": "assistant", "content": "\\boxed{C}"},
                {"role": "assistant", "content": [{"type": "text", "text": "\\boxed{B}"}]}]
    assert env.verify(task, Trajectory(messages=messages)).reward == 1.0


@pytest.mark.parametrize(
    "options",
    [
        [{"A": "Oxygen"}, {"B": "Nitrogen"}],
        {"A": "Oxygen", "B": "Nitrogen"},
        ["Oxygen", "Nitrogen"],
    ],
)
def test_option_shapes_are_rendered_into_the_prompt(options: object) -> None:
    env = MCQA()
    task = Task(id="t", input="Which gas is most common in air?",
                metadata={"options": options, "expected_answer": "B"})
    content = env.prompt(task)[-1]["content"]
    assert "A) Oxygen\nB) Nitrogen" in content and "\\boxed{" in content
    assert "expected_answer" not in content


def test_nemo_gym_row_with_inline_options_is_used_as_is() -> None:
    env = MCQA()
    question = ("Which gas is most common in air?\nA: Oxygen\nB: Nitrogen\nC: Carbon dioxide\nD: Argon\n"
                "Put the letter in \\boxed{}.")
    task = Task(
        id="nemo-1", env="mcqa", input=[{"role": "user", "content": question}],
        metadata={"options": [{"A": "Oxygen"}, {"B": "Nitrogen"}, {"C": "Carbon dioxide"}, {"D": "Argon"}],
                  "expected_answer": "B", "grading_mode": "strict_single_letter_boxed", "uuid": "x-1"},
    )
    env.check_task(task)
    assert env.prompt(task) == [{"role": "user", "content": question}]
    assert env.verify(task, _say(env, task, env.reference(task).final_answer or "")).reward == 1.0
    assert env.verify(task, _say(env, task, "The answer is B")).reward == 0.0


def test_fields_nested_under_metadata_are_found() -> None:
    env = MCQA()
    task = Task(id="n", input="Q?", metadata={"metadata": {"options": ["x", "y"], "expected_answer": "A"}})
    env.check_task(task)
    assert env.verify(task, Trajectory(final_answer="\\boxed{A}")).reward == 1.0


@pytest.mark.parametrize(
    ("metadata", "needle"),
    [
        ({"options": ["x", "y"]}, "expected_answer"),
        ({"options": ["x", "y"], "expected_answer": "C"}, "not one of the option letters"),
        ({"options": [{"AB": "x"}], "expected_answer": "A"}, "options"),
        ({"options": 5, "expected_answer": "A"}, "options"),
        ({"options": ["x"], "expected_answer": "A", "grading_mode": "fuzzy"}, "grading_mode"),
    ],
)
def test_invalid_tasks_name_the_problem(metadata: dict[str, object], needle: str) -> None:
    with pytest.raises(InvalidTask, match=needle):
        MCQA().check_task(Task(id="bad", input="Q?", metadata=metadata))


def test_info_describes_a_single_turn_env_without_tools() -> None:
    info = MCQA().info()
    assert info["name"] == "mcqa" and info["tools"] == [] and info["mechanism"] == "single-turn"


def test_a_task_checked_once_is_not_checked_again_by_another_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run checks each row when it selects rows and again when the row's session opens, on two MCQA
    instances; the second check (and every later use of the options) reuses the first. A row that fails
    is never remembered, so every instance refuses it again, by name."""
    checks: list[str] = []
    real = MCQA._checked_options

    def counted(self: MCQA, task: Task) -> object:
        checks.append(task.id)
        return real(self, task)

    monkeypatch.setattr(MCQA, "_checked_options", counted)
    task = _task(options=[{"A": "red"}, {"B": "blue"}], expected_answer="B")
    task = task.model_copy(update={"id": "memo-shared"})
    selection, sessions = MCQA(), MCQA(nemo_compat=True)
    selection.check_task(task)
    sessions.check_task(task)
    assert "B) blue" in sessions.prompt(task)[-1]["content"]
    assert sessions.verify(task, _say(sessions, task, "\\boxed{B}")).reward == 1.0
    assert checks == ["memo-shared"]
    equal = task.model_copy()  # an equal task that is another object is checked on its own
    sessions.check_task(equal)
    assert checks == ["memo-shared", "memo-shared"]

    bad = _task(options=[{"A": "red"}], expected_answer="Z").model_copy(update={"id": "memo-bad"})
    for env in (selection, sessions):
        with pytest.raises(InvalidTask, match="memo-bad"):
            env.check_task(bad)
    assert checks.count("memo-bad") == 2

    class Strict(MCQA):  # a subclass keeps its own memo: its check may differ
        pass

    Strict().check_task(task)
    assert checks.count("memo-shared") == 3
