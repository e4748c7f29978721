from __future__ import annotations

import json

import pytest

from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task, Trajectory
from palaestra.envs.reasoning_gym.env import ReasoningGym, extract_answer
from palaestra.envs.reasoning_gym.generate import main as generate_main

rg = pytest.importorskip("reasoning_gym", reason="reasoning-gym: the [reasoning] extra is not installed")


def _row(dataset: str = "leg_counting", seed: int = 42, index: int = 0, **extra: object) -> Task:
    return Task(id="t", env="reasoning_gym", input="", metadata={"dataset": dataset, "seed": seed, "index": index,
                                                                 **extra})


def test_bundled_rows_score_with_the_librarys_scorer() -> None:
    env = ReasoningGym()
    tasks = env.examples()
    assert len(tasks) >= 20 and len({t.metadata["dataset"] for t in tasks}) >= 5
    for task in tasks:
        env.check_task(task)
        ref = env.reference(task)
        verdict = env.verify(task, Trajectory(final_answer=ref.final_answer))
        assert verdict.reward == 1.0 and verdict.passed, task.id
        assert env.verify(task, Trajectory(final_answer="")).reward == 0.0


def test_entries_match_what_the_library_generates() -> None:
    config = {"min_terms": 2, "max_terms": 3}
    tasks = ReasoningGym.generate_tasks("basic_arithmetic", 4, seed=5, config=config)
    direct = rg.create_dataset("basic_arithmetic", size=4, seed=5, **config)
    assert [t.input for t in tasks] == [direct[i]["question"] for i in range(4)]
    assert tasks[2].metadata == {"dataset": "basic_arithmetic", "seed": 5, "index": 2, "size": 4, "config": config,
                                 "reasoning_gym_version": tasks[2].metadata["reasoning_gym_version"]}
    env = ReasoningGym()
    assert env.reference(tasks[2]).final_answer == f"<answer>{direct[2]['answer']}</answer>"
    assert ReasoningGym.generate_tasks("basic_arithmetic", 4, seed=5, config=config) == tasks


def test_answers_are_read_from_the_last_answer_tag_or_the_whole_reply() -> None:
    assert extract_answer("think <answer>1</answer> no wait <answer> 2 </answer>") == "2"
    assert extract_answer("  42 ") == "42"
    assert extract_answer("<answer> </answer>") is None and extract_answer("") is None
    env = ReasoningGym()
    task = _row()
    answer = rg.create_dataset("leg_counting", size=1, seed=42)[0]["answer"]
    assert env.verify(task, Trajectory(final_answer=f"Counting... <answer>{answer}</answer>")).passed
    assert env.verify(task, Trajectory(final_answer=answer)).passed
    wrong = env.verify(task, Trajectory(final_answer="<answer>-1</answer>"))
    assert wrong.reward == 0.0 and wrong.answer == "-1" and not wrong.passed


def test_partial_credit_and_scorer_errors_are_scores_not_failures() -> None:
    env = ReasoningGym()
    spelled = _row("spell_backward", index=0, size=3)
    item = env.entry(spelled)[1]
    partial = env.verify(spelled, Trajectory(final_answer=f"<answer>{item['answer'][:-1]}x</answer>"))
    assert 0.0 <= partial.reward < 1.0 and not partial.passed
    choked = env.verify(_row("prime_factorization"), Trajectory(final_answer="<answer>zzz</answer>"))
    assert choked.reward == 0.0 and "scorer_error" in choked.metadata


def test_rows_from_another_library_version_or_bad_recipes_are_rejected() -> None:
    env = ReasoningGym()
    drifted = _row().model_copy(update={"input": "How many legs do 3 cats have?"})
    with pytest.raises(InvalidTask, match="differs from the question"):
        env.check_task(drifted)
    with pytest.raises(InvalidTask, match="cannot create dataset 'no_such_dataset'"):
        env.check_task(_row("no_such_dataset"))
    with pytest.raises(InvalidTask, match="needs metadata.dataset"):
        env.check_task(Task(id="t", metadata={"dataset": "leg_counting"}))
    with pytest.raises(InvalidTask, match="not below size"):
        env.check_task(_row(index=3, size=2))


def test_an_empty_input_is_filled_with_the_generated_question() -> None:
    env = ReasoningGym()
    messages = env.prompt(_row())
    assert messages[0]["role"] == "system" and "<answer>" in messages[0]["content"]
    assert messages[1]["content"] == rg.create_dataset("leg_counting", size=1, seed=42)[0]["question"]


def test_generator_cli_writes_task_rows(capsys: pytest.CaptureFixture[str]) -> None:
    generate_main(["--dataset", "gcd", "--size", "2", "--seed", "3"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in rows] == ["rg-gcd-s3-000", "rg-gcd-s3-001"]
    assert all(ReasoningGym().verify(Task.model_validate(r), Trajectory(final_answer="")).reward == 0 for r in rows)


def test_references_are_verified_by_the_datasets_scorer_or_absent() -> None:
    env = ReasoningGym()
    # graph_color's entries have no answer; the generator's possible_answer is a colouring the scorer accepts
    colour = _row("graph_color", index=1, size=2)
    assert env.entry(colour)[1]["answer"] is None
    ref = env.reference(colour)
    assert ref is not None and env.verify(colour, Trajectory(final_answer=ref.final_answer)).reward == 1.0
    assert env.verify(colour, Trajectory(final_answer="<answer>{}</answer>")).reward < 1.0
    # boxnet leaves no solution anywhere: no reference, rather than one that scores 0
    assert env.reference(_row("boxnet")) is None


def test_composite_is_generated_from_a_config_of_dataset_objects() -> None:
    config = {"datasets": [{"name": "chain_sum", "weight": 1, "config": {}},
                           {"name": "gcd", "weight": 1, "config": {}}]}
    tasks = ReasoningGym.generate_tasks("composite", 6, seed=4, config=config)
    env = ReasoningGym()
    sources = set()
    for task in tasks:
        env.check_task(task)
        ref = env.reference(task)
        assert ref is not None and env.verify(task, Trajectory(final_answer=ref.final_answer)).reward == 1.0
        sources.add(env.entry(task)[1]["metadata"]["source_dataset"])
    assert sources <= {"chain_sum", "gcd"} and sources
    with pytest.raises(InvalidTask, match="composite"):
        env.check_task(_row("composite"))
    with pytest.raises(InvalidTask, match="needs a name"):
        env.check_task(_row("composite", config={"datasets": [{"weight": 1}]}))
