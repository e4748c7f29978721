"""The ``nemo_compat`` switch and ``template_metadata.output_regex`` without a NeMo Gym install: the
behaviours docs/nemo_gym_parity.md describes, on rows shaped as NeMo Gym ships them (the differential
test in test_nemo_parity.py checks them against NeMo Gym itself where it is installed)."""

from __future__ import annotations

import pytest

from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task, Trajectory
from palaestra.envs.math_env.env import MathEnv
from palaestra.envs.mcqa.env import MCQA
from palaestra.rollout.tasks import parse_row

OPTIONS = [{"A": "Karyotyping"}, {"B": "PCR"}, {"C": "Chromosome painting"}, {"D": "Electrophoresis"}]


def _row(**extra: object) -> dict[str, object]:
    return {"responses_create_params": {"input": [{"role": "user", "content": "Which test? A: Karyotyping\n"
                                                    "B: PCR\nC: Chromosome painting\nD: Electrophoresis"}]},
            "options": OPTIONS, "expected_answer": "B", **extra}


def _reward(env: MCQA, task: Task, reply: str) -> float:
    env.check_task(task)
    return env.verify(task, Trajectory(final_answer=reply)).reward


def _template(regex: str) -> dict[str, object]:
    return {"template_metadata": {"template_id": "t", "output_regex": regex}}


def test_output_regex_is_honoured_and_does_not_guess() -> None:
    task = parse_row(_row(**_template(r"Final Choice:\s*([A-Za-z])\s*")), "r1", "mcqa")
    default, compat = MCQA(), MCQA(nemo_compat=True)
    assert _reward(default, task, "Thinking...\nFinal Choice: B") == 1.0
    assert _reward(default, task, "final choice: b") == 1.0
    # the first letter of a word is not an answer; NeMo Gym takes it (D's text, gold B: B is "PCR"...)
    wordy = parse_row({**_row(**_template(r"Final Choice:\s*([A-Za-z])\s*")), "expected_answer": "D"}, "r2", "mcqa")
    assert _reward(default, wordy, "Final Choice: Don't know") == 0.0
    assert _reward(compat, wordy, "Final Choice: Don't know") == 1.0
    two = default.verify(task, Trajectory(final_answer="Final Choice: B or C"))
    assert two.reward == 0.0 and two.metadata["reason"] == "ambiguous"
    assert _reward(compat, task, "Final Choice: B or C") == 1.0
    # no match: NeMo Gym's default grading mode (strict boxed) decides, on both sides
    assert _reward(default, task, "\\boxed{B}") == _reward(compat, task, "\\boxed{B}") == 1.0
    assert _reward(default, task, "The answer is B.") == _reward(compat, task, "The answer is B.") == 0.0


def test_an_invalid_output_regex_refuses_the_row() -> None:
    task = parse_row(_row(**_template(r"Answer: ([A-D")), "bad", "mcqa")
    with pytest.raises(InvalidTask, match="output_regex"):
        MCQA().check_task(task)


def test_nemo_compat_reads_the_first_answer_colon_and_a_row_flag_overrides_the_env() -> None:
    row = _row(grading_mode="lenient_answer_colon")
    task = parse_row(row, "c", "mcqa")
    reply = "Answer: B\n\nHmm, re-checking.\n\nAnswer: C"
    assert _reward(MCQA(), task, reply) == 0.0  # the last Answer: wins
    assert _reward(MCQA(nemo_compat=True), task, reply) == 1.0  # NeMo Gym takes the first
    flagged = parse_row({**row, "nemo_compat": True}, "c2", "mcqa")
    assert _reward(MCQA(), flagged, reply) == 1.0
    with pytest.raises(InvalidTask, match="nemo_compat"):
        MCQA().check_task(parse_row({**row, "nemo_compat": "yes"}, "c3", "mcqa"))


def test_gpqa_rows_are_read_by_the_gpqa_rule_whatever_their_grading_mode() -> None:
    row = _row(grading_mode="strict_single_letter_boxed",
               agent_ref={"type": "responses_api_agents", "name": "gpqa_diamond_simple_agent"})
    task = parse_row(row, "g", "mcqa")
    env, compat = MCQA(), MCQA(nemo_compat=True)
    assert _reward(env, task, "Reasoning.\nAnswer: B") == _reward(compat, task, "Reasoning.\nAnswer: B") == 1.0
    assert env.verify(task, Trajectory(final_answer="Answer: B")).metadata["read_as"] == "gpqa_diamond"
    assert _reward(env, task, "\\boxed{B \\text{ or } C}") == 0.0  # ambiguous
    # gpqa's box ends at the first "}" ("B \\text{ or "), whose last capital is B
    assert _reward(compat, task, "\\boxed{B \\text{ or } C}") == 1.0


@pytest.mark.parametrize("reply", ["\\boxed{B: PCR}", "\\boxed{B) PCR}", "\\boxed{\\text{B}}", "\\boxed{{B}}",
                                   "\\boxed{\\textbf{B}}"])
def test_strict_boxes_read_labels_and_wrappers(reply: str) -> None:
    task = parse_row(_row(grading_mode="strict_single_letter_boxed"), "s", "mcqa")
    assert _reward(MCQA(), task, reply) == 1.0


def test_strict_box_holding_an_option_text_that_starts_like_a_label_is_not_that_label() -> None:
    options = [{"A": "E. coli"}, {"B": "Yeast"}, {"C": "Algae"}, {"D": "Moss"}, {"E": "Fern"}]
    task = Task(id="e", env="mcqa", input="Which organism?",
                metadata={"options": options, "expected_answer": "E", "grading_mode": "strict_single_letter_boxed"})
    assert _reward(MCQA(), task, "\\boxed{E. coli}") == 0.0
    assert _reward(MCQA(nemo_compat=True), task, "\\boxed{E. coli}") == 1.0  # NeMo Gym's "." label


async def test_math_nemo_compat_requires_a_box_and_reads_the_whole_reply() -> None:
    task = parse_row({"responses_create_params": {"input": [{"role": "user", "content": "1+31?"}]},
                      "question": "1+31?", "expected_answer": "\\(32\\)"}, "m", "math")
    default, compat = MathEnv(verify_timeout=120), MathEnv(nemo_compat=True, verify_timeout=120)
    assert (await default.verify(task, Trajectory(final_answer="Answer: 32"))).reward == 1.0
    assert (await compat.verify(task, Trajectory(final_answer="Answer: 32"))).reward == 0.0
    assert (await compat.verify(task, Trajectory(final_answer="So \\boxed{32}."))).reward == 1.0
    both = "First \\boxed{7}, then correcting: \\boxed{32}"
    assert (await default.verify(task, Trajectory(final_answer=both))).reward == 1.0
    assert (await compat.verify(task, Trajectory(final_answer=both))).reward == 0.0  # math-verify reads {7, 32}
    cut = await default.verify(task, Trajectory(final_answer="The result is \\boxed{3"))
    assert cut.reward == 0.0 and cut.metadata["reason"] == "unclosed_box"


def test_a_run_file_turns_nemo_compat_on_for_the_run() -> None:
    from palaestra.envs.registry import load_env
    from palaestra.rollout.config import RunConfig, env_options

    options = env_options(RunConfig.model_validate({"nemo_compat": True}))
    mcqa, math = load_env("mcqa", options), load_env("math", options)
    assert isinstance(mcqa, MCQA) and mcqa.nemo_compat and isinstance(math, MathEnv) and math.nemo_compat
    default = load_env("mcqa", env_options(RunConfig()))
    assert isinstance(default, MCQA) and not default.nemo_compat


def _tool_row(**extra: object) -> dict[str, object]:
    """A structured_outputs row as NeMo Gym ships them: the payload goes through a named tool."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "year": {"type": "integer"}},
              "required": ["name"]}
    tools = [{"type": "function", "name": n, "description": "Return the summary.",
              "parameters": {"type": "object", "properties": {"extraction": schema}}} for n in ("t1", "t2")]
    import json

    return {"responses_create_params": {"input": [{"role": "user", "content": "Summarise."}], "tools": tools},
            "schema_str": json.dumps(schema), "schema_type": "json", "response_mode": "tool_call",
            "tool_name": "t1", "tool_payload_key": "extraction", **extra}


def _calls(*pairs: tuple[str, object]) -> Trajectory:
    from palaestra.core.records import ToolCallRecord

    return Trajectory(tool_calls=[ToolCallRecord(name=n, arguments=a) for n, a in pairs])


def test_structured_outputs_nemo_compat_wants_one_call_and_a_strict_schema() -> None:
    from palaestra.envs.json_schema.env import JSONSchema

    task = parse_row(_tool_row(), "so", "json_schema")
    default, compat = JSONSchema(), JSONSchema(nemo_compat=True)
    full = {"extraction": {"name": "Ada", "year": 1815}}
    assert default.verify(task, _calls(("t1", full))).reward == compat.verify(task, _calls(("t1", full))).reward == 1.0
    twice = _calls(("t2", full), ("t1", full))  # a distractor, then the answer tool
    assert default.verify(task, twice).reward == 1.0
    assert compat.verify(task, twice).reward == 0.0 and compat.verify(task, twice).metadata["reason"] == \
        "multiple_tool_calls"
    optional_left_out = _calls(("t1", {"extraction": {"name": "Ada"}}))  # "year" is optional as written
    assert default.verify(task, optional_left_out).passed
    strict = compat.verify(task, optional_left_out)
    assert strict.reward == 0.0 and strict.metadata["nemo_compat"] is True  # NeMo Gym requires every property
    wrong_type = _calls(("t1", {"extraction": {"name": "Ada", "year": "1815"}}))
    assert 0.0 < default.verify(task, wrong_type).reward < 1.0 and compat.verify(task, wrong_type).reward == 0.0
    flagged = parse_row(_tool_row(nemo_compat=True), "so2", "json_schema")  # a row's flag wins
    assert default.verify(flagged, twice).reward == 0.0


def test_reasoning_gym_nemo_compat_reads_lowercase_tags_then_a_box() -> None:
    from palaestra.envs.reasoning_gym.env import ReasoningGym, nemo_answer

    assert nemo_answer("<ANSWER>x</ANSWER>") == "<ANSWER>x</ANSWER>"  # upper-case tags are no tags to NeMo Gym
    assert nemo_answer("<answer> 7 </answer> then <answer>8</answer>") == "8"
    assert nemo_answer("so \\boxed{12} and \\boxed{13}") == "12"  # the first box, when no tags
    assert nemo_answer("  plain  ") == "plain" and nemo_answer("") == ""
    row = {"responses_create_params": {"input": [{"role": "user", "content": "How many legs has 1 dog?"}]},
           "question": "How many legs has 1 dog?", "answer": "4",
           "metadata": {"source_dataset": "leg_counting", "question": "How many legs has 1 dog?"}}
    task = parse_row(row, "rg", "reasoning_gym")
    default, compat = ReasoningGym(), ReasoningGym(nemo_compat=True)
    assert default.verify(task, Trajectory(final_answer="<ANSWER>4</ANSWER>")).reward == 1.0
    # the scorer gets the whole reply (leg_counting gives a text that is no number a token score)
    assert compat.verify(task, Trajectory(final_answer="<ANSWER>4</ANSWER>")).reward < 1.0
    assert default.verify(task, Trajectory(final_answer="\\boxed{4}")).reward < 1.0
    assert compat.verify(task, Trajectory(final_answer="\\boxed{4}")).reward == 1.0


def test_a_run_file_turns_nemo_compat_on_for_structured_outputs_and_reasoning_gym() -> None:
    from palaestra.envs.json_schema.env import JSONSchema
    from palaestra.envs.reasoning_gym.env import ReasoningGym
    from palaestra.envs.registry import load_env
    from palaestra.rollout.config import RunConfig, env_options

    options = env_options(RunConfig.model_validate({"nemo_compat": True}))
    so, rg = load_env("json_schema", options), load_env("reasoning_gym", options)
    assert isinstance(so, JSONSchema) and so.nemo_compat and isinstance(rg, ReasoningGym) and rg.nemo_compat
