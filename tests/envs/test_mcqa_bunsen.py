"""BunsenBench rows in mcqa: option text whose case tells options apart, and the ``nemo_compat`` reading
of NeMo Gym's BunsenBench reader, on rows shaped as NeMo Gym ships them (tests/parity checks the reader
against NeMo Gym itself where it is installed)."""

from __future__ import annotations

import pytest

from palaestra.core.records import Task, Trajectory
from palaestra.envs.mcqa.env import MCQA
from palaestra.rollout.tasks import parse_row

OPTIONS = [{"A": "CO2"}, {"B": "CO"}, {"C": "Co"}, {"D": "H2O"}, {"E": "Ketone"}]
AGENT = {"type": "responses_api_agents", "name": "bunsenbench_chemistry_mcq_simple_agent"}


def _task(gold: str = "B") -> Task:
    choices = "".join(f"<choice>{text}</choice>\n" for entry in OPTIONS for text in entry.values())
    row = {
        "responses_create_params": {
            "input": [
                {
                    "role": "user",
                    "content": f"Which?\n<choices>\n{choices}</choices>\nRespond in <choice></choice> tags.",
                }
            ]
        },
        "options": OPTIONS,
        "expected_answer": gold,
        "agent_ref": AGENT,
    }
    return parse_row(row, "b", "mcqa")


def _answer(reply: str, compat: bool, gold: str = "B") -> str | None:
    env, task = MCQA(nemo_compat=compat), _task(gold)
    env.check_task(task)
    return env.verify(task, Trajectory(final_answer=reply)).answer


@pytest.mark.parametrize(
    ("reply", "letter"),
    [
        ("<choice>CO</choice>", "B"),
        ("<choice>Co</choice>", "C"),  # the case tells these two apart
        ("<choice>co</choice>", None),  # ...so a reply in neither case names neither
        ("<choice>h2o</choice>", "D"),
        ("<choice>ketone</choice>", "E"),  # only one option can be meant
        ("<choice>CO2</choice>", "A"),
    ],
)
def test_option_text_keeps_the_case_where_it_tells_options_apart(reply: str, letter: str | None) -> None:
    assert _answer(reply, compat=False) == letter


@pytest.mark.parametrize(
    ("reply", "letter"),
    [
        ("<choice>CO</choice>", "B"),
        ("<choice>h2o</choice>", None),  # NeMo Gym's reader: case always counts
        ("Answer: CO", "B"),
        ("Answer: b", "B"),
        ("\\boxed{Co}", "C"),
        ("<answer>H₂O</answer>", "D"),
        ("The answer is CO.", "B"),
        ("I choose option E", "E"),
        ("CO2", "A"),
        ("D", "D"),
        ("**Answer:** (C)", "C"),
        ("<response>\\text{Ketone}</response>", "E"),
        ("<choice>CO</choice> on reflection <choice>Co</choice>", "C"),  # the latest candidate wins
        ("<choices><choice>CO2</choice></choices>\nAnswer: Ketone", "E"),  # a restated list is no answer
        ("I cannot help with that.", None),
        ("<choice>CO", None),
    ],
)
def test_nemo_compat_reads_the_bunsenbench_way(reply: str, letter: str | None) -> None:
    assert _answer(reply, compat=True) == letter


def test_bunsen_rows_say_how_they_were_read() -> None:
    env, task = MCQA(nemo_compat=True), _task()
    env.check_task(task)
    verdict = env.verify(task, Trajectory(final_answer="Answer: CO"))
    assert verdict.reward == 1.0
    assert verdict.metadata["read_as"] == "bunsenbench_chemistry_mcq"
    assert verdict.metadata["extracted_by"] == "nemo_bunsenbench"
    assert MCQA().verify(task, Trajectory(final_answer="Answer: CO")).reward == 0.0  # asks for <choice>


def test_a_formula_whose_one_letter_is_an_option_letter_is_its_option_by_default() -> None:
    """NeMo Gym's reader tries a letter before option text, so ``C2`` (option D's text) reads as option C;
    Palaestra's default reads the option it names. Checked against NeMo Gym 0.7 (docs/nemo_gym_parity.md)."""
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": "Which is dicarbon?"}]},
        "options": [{"A": "H2"}, {"B": "O2"}, {"C": "N2"}, {"D": "C2"}],
        "expected_answer": "D",
        "agent_ref": AGENT,
    }
    task = parse_row(row, "c2", "mcqa")
    default, compat = MCQA(), MCQA(nemo_compat=True)
    default.check_task(task)
    assert default.verify(task, Trajectory(final_answer="<choice>C2</choice>")).answer == "D"
    assert compat.verify(task, Trajectory(final_answer="<choice>C2</choice>")).answer == "C"
    assert compat.verify(task, Trajectory(final_answer="<choice>O2</choice>")).answer == "B"  # O is no option letter
