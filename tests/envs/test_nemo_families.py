"""NeMo Gym rows graded by Palaestra's native environments (adapters/nemo_gym_families.py: the table,
adapters/nemo_gym_rows.py: the field translation): real rows from NeMo Gym's example files
(tests/fixtures/nemo_gym_rows, copied unchanged), read as they are, checked, run with the scripted oracle
end to end, and graded right and wrong by each environment's verifier. NeMo Gym itself is not needed here;
tests/parity compares the verdicts with NeMo Gym's own verifiers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from palaestra.adapters import nemo_gym_families, nemo_gym_rows
from palaestra.core.records import Task, ToolCallRecord, Trajectory
from palaestra.envs.ifeval import constraints as C
from palaestra.envs.ifeval.compose import compose
from palaestra.envs.ifeval.env import IFEval
from palaestra.envs.json_schema.env import JSONSchema
from palaestra.envs.reasoning_gym.env import ReasoningGym
from palaestra.envs.sql.env import SQLEnv
from palaestra.envs.tool_call.env import ToolCallEnv
from palaestra.orchestrator import run_eval
from palaestra.rollout import rundir
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal_read import read_journal
from palaestra.rollout.selection import _Row, check_rows
from palaestra.rollout.tasks import load_task_file

ROWS = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_gym_rows"
# family -> rows its example lines hold that Palaestra refuses at load, each with a word of the reason
REFUSED = {"ifbench": {4: "part-of-speech"}, "text_to_sql": {2: "sql_dialect"}}
RG_SKIP = "reasoning-gym: the [reasoning] extra is not installed"


def _needs(family: str) -> None:
    if family == "reasoning_gym":
        pytest.importorskip("reasoning_gym", reason=RG_SKIP)


def _tasks(family: str) -> list[Task]:
    env = nemo_gym_families.FAMILIES[family].env
    assert env is not None
    loaded = load_task_file(ROWS / f"{family}.jsonl", env)
    assert not loaded.problems
    return loaded.tasks


def _raw(family: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (ROWS / f"{family}.jsonl").read_text(encoding="utf-8").splitlines() if line]


FAMILIES = sorted(p.stem for p in ROWS.glob("*.jsonl"))


def test_every_fixture_is_a_family_with_a_native_environment() -> None:
    assert FAMILIES and all(nemo_gym_families.FAMILIES[f].native for f in FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_rows_load_check_and_refuse_only_what_cannot_be_graded(family: str) -> None:
    _needs(family)
    tasks = _tasks(family)
    problems = check_rows([_Row(t, family, i) for i, t in enumerate(tasks, 1)])
    refused = {p.line: p.message for p in problems}
    assert set(refused) == set(REFUSED.get(family, {}))
    for line, word in REFUSED.get(family, {}).items():
        assert word in refused[line]


@pytest.mark.parametrize("family", FAMILIES)
async def test_the_oracle_scores_every_loaded_row_in_full(family: str, tmp_path: Path) -> None:
    """scripted:oracle plays back each environment's reference for rows that carry no answer of their own."""
    _needs(family)
    env = nemo_gym_families.FAMILIES[family].env
    out = tmp_path / "run"
    await run_eval(RunConfig(input=str(ROWS / f"{family}.jsonl"), env=env, model="scripted:oracle",
                             concurrency=2, skip_invalid=True, out=str(out)))
    records, problems = read_journal(out / rundir.JOURNAL)
    assert not problems
    want = len(_raw(family)) - len(REFUSED.get(family, {}))
    assert len(records) == want
    assert all(r["outcome"]["status"] == "scored" for r in records), [r["outcome"] for r in records]
    assert [r["verdict"]["reward"] for r in records] == [1.0] * want


def test_mapping_adds_native_fields_and_never_overwrites_the_rows_own() -> None:
    meta = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{"x": None}], "constraints": "mine"}
    assert nemo_gym_rows.to_native("ifeval", meta)["constraints"] == "mine"
    added = nemo_gym_rows.to_native("ifeval", {k: v for k, v in meta.items() if k != "constraints"},
                                    "instruction_following")
    assert added["constraints"] == [{"kind": "punctuation:no_comma"}]
    assert added["grading_mode"] == "binary" and added["instruction_id_list"] == ["punctuation:no_comma"]
    assert nemo_gym_rows.to_native("mcqa", meta) is meta
    assert nemo_gym_rows.to_native("tool_call", {"unrelated": 1}) == {"unrelated": 1}


def test_every_family_has_an_environment_native_or_nemo_gyms_own_server() -> None:
    assert len(nemo_gym_families.FAMILIES) >= 145
    for name, fam in nemo_gym_families.FAMILIES.items():
        assert fam.native != bool(fam.reason), name  # a family NeMo Gym's server grades says why
        assert fam.native or fam.env == f"nemo_gym:{name}", name
        assert nemo_gym_families.refusal(name) is None
    assert nemo_gym_families.refusal("no_such_server") is not None
    assert nemo_gym_families.server_of_agent("gpqa_diamond_simple_agent") == "gpqa_diamond"
    assert nemo_gym_families.server_of_agent("no_such_agent") is None


# ---- instruction following ------------------------------------------------------------------------------

def test_binary_grading_needs_every_instruction() -> None:
    task = _tasks("instruction_following")[0]  # nth_paragraph_first_word + last_word_answer
    env = IFEval()
    half = "One.\n\nTwo.\n\ncrash three.\n\nFour words here."  # paragraphs right, last word wrong
    assert env.verify(task, Trajectory(final_answer=half)).reward == 0.5
    binary = task.model_copy(update={"metadata": {**task.metadata, "grading_mode": "binary"}})
    verdict = env.verify(binary, Trajectory(final_answer=half))
    assert verdict.reward == 0.0 and verdict.components == {
        "1.length_constraints:nth_paragraph_first_word": 1.0, "2.last_word:last_word_answer": 0.0}
    assert env.verify(binary, Trajectory(final_answer=half[:-1] + " contest.")).reward == 1.0


@pytest.mark.parametrize(("constraint", "good", "bad"), [
    ({"kind": "length_constraints:number_words", "num_words": 4, "relation": "less than"}, "one two three",
     "one two three four"),
    ({"kind": "length_constraints:number_sentences", "num_sentences": 2, "relation": "at least"}, "A b. C d.", "A b."),
    ({"kind": "length_constraints:number_paragraphs", "num_paragraphs": 2}, "a b\n***\nc d", "a b\n\nc d"),
    ({"kind": "count:lowercase_counting", "N": 2}, "the cat and the dog", "the the the cat"),
    ({"kind": "detectable_format:number_bullet_lists", "num_bullets": 2}, "* a\n* b", "* a\n* b\n* c"),
    ({"kind": "keywords:forbidden_words", "forbidden_words": ["part"]}, "a partial view", "a part of it"),
    ({"kind": "first_word:first_word_sent", "first_word": "so"}, "So it goes. So we go.", "So it goes. We go."),
    ({"kind": "detectable_content:number_placeholders", "num_placeholders": 2}, "[a] and [b]", "[a] only"),
    ({"kind": "letters:letter_counting", "N": 5, "relation": "less than"}, "abcd", "abcdef"),
    ({"kind": "count:keywords_multiple", "keyword1": "x", "keyword2": "y"}, "x y y", "x x y"),
    ({"kind": "format:line_indent"}, "a\n b\n  c", "a\n b\n c"),
    ({"kind": "ratio:stop_words", "percentage": 50.0}, "the cat sat down", "the and of it cat"),
    ({"kind": "last_word:last_word_answer", "last_word": "contest"}, "We won the contest.", "The contest we won."),
])
def test_nemo_instruction_ids_accept_and_reject(constraint: dict[str, Any], good: str, bad: str) -> None:
    assert C.check(constraint, good)[0], C.check(constraint, good)
    assert not C.check(constraint, bad)[0], C.check(constraint, bad)


def test_the_composed_reference_meets_each_rows_constraints_or_is_absent() -> None:
    for task in _tasks("instruction_following") + _tasks("ifbench")[:3]:
        text = compose(task.metadata["constraints"])
        assert text is not None, task.metadata["instruction_id_list"]
        assert all(C.check(c, text)[0] for c in task.metadata["constraints"])
    assert compose([{"kind": "length_constraints:number_sentences", "num_sentences": 1, "relation": "less than"}]) \
        is None


# ---- structured outputs, tool use, SQL, reasoning-gym ---------------------------------------------------

def test_structured_output_is_read_from_the_named_tools_payload_and_validated() -> None:
    task = _tasks("structured_outputs")[0]
    env = JSONSchema()
    tool, key = task.metadata["answer_tool"], task.metadata.get("answer_tool_key")
    ref = env.reference(task)
    assert ref is not None and ref.tool_calls[0].name == tool
    good = ref.tool_calls[0].arguments

    def score(calls: list[tuple[str, Any]]) -> float:
        traj = Trajectory(tool_calls=[ToolCallRecord(name=n, arguments=a) for n, a in calls])
        return env.verify(task, traj).reward

    assert score([(tool, good)]) == 1.0
    assert score([(tool, json.dumps(good))]) == 1.0  # Responses-API arguments are a JSON string
    assert score([]) == 0.0
    broken = {key: {"unexpected": True}} if key else {"unexpected": True}
    assert score([(tool, broken)]) == 0.5  # parsed, but the schema refuses it
    assert score([(tool, good), (tool, broken)]) == 0.5  # the last call counts


def test_tool_use_compares_the_expected_action() -> None:
    call_task, message_task = _tasks("single_step_tool_use_with_argument_comparison")
    env = ToolCallEnv()
    action = call_task.metadata["expected_action"]
    args = json.loads(action["arguments"])

    def score(task: Task, calls: list[tuple[str, Any]]) -> float:
        traj = Trajectory(tool_calls=[ToolCallRecord(name=n, arguments=a) for n, a in calls], final_answer="ok")
        return env.verify(env.seed(task), traj).reward

    assert score(call_task, [(action["name"], action["arguments"])]) == 1.0
    wrong = {k: f"{v}-not" if isinstance(v, str) else v for k, v in args.items()}
    assert score(call_task, [(action["name"], wrong)]) < 1.0
    assert score(call_task, []) == 0.0
    assert score(message_task, []) == 1.0  # the expected action is a message: no call is right
    assert score(message_task, [(action["name"], args)]) < 1.0


def test_text_to_sql_executes_both_queries_on_the_rows_database() -> None:
    task = _tasks("text_to_sql")[0]
    assert task.metadata["sql_dialect"] == "sqlite"
    env = SQLEnv()
    state = env.seed(task)
    try:
        gold = env.verify(state, Trajectory(final_answer=f"```sql\n{task.metadata['sql']}\n```"))
        wrong = env.verify(state, Trajectory(final_answer="```sql\nSELECT 1\n```"))
    finally:
        env.close(state)
    assert gold.reward == 1.0 and wrong.reward == 0.0


def test_reasoning_gym_rows_are_scored_by_the_librarys_scorer_for_their_dataset() -> None:
    _needs("reasoning_gym")
    task = _tasks("reasoning_gym")[0]
    env = ReasoningGym()
    env.check_task(task)
    answer = task.metadata["answer"]
    right = env.verify(task, Trajectory(final_answer=f"<answer>{answer}</answer>"))
    wrong = env.verify(task, Trajectory(final_answer="<answer>nobody knows</answer>"))
    assert right.reward == 1.0 and right.metadata["dataset"] == task.metadata["metadata"]["source_dataset"]
    assert wrong.reward < 1.0
    assert env.prompt(task) == task.messages()  # the row's own prompt, no system prompt added


def test_a_choice_tag_answer_is_read_for_the_rows_that_ask_for_it(tmp_path: Path) -> None:
    """bunsenbench rows ask for ``<choice>option text</choice>``: the mapping gives mcqa that pattern."""
    from palaestra.envs.mcqa.env import MCQA

    row = {"responses_create_params": {"input": [{"role": "user", "content": "Conjugate acid of OH-?\n<choices>\n"
                                                  "<choice>O2</choice>\n<choice>H2O</choice>\n</choices>"}]},
           "options": [{"A": "O2"}, {"B": "H2O"}], "expected_answer": "B", "uuid": "b1",
           "agent_ref": {"type": "responses_api_agents", "name": "bunsenbench_chemistry_mcq_simple_agent"}}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    (task,) = load_task_file(path, "mcqa").tasks
    env = MCQA()
    assert env.verify(task, Trajectory(final_answer="So: <choice>H2O</choice>")).reward == 1.0
    assert env.verify(task, Trajectory(final_answer="<choice>O2</choice>")).reward == 0.0
    mine = {**row, "template_metadata": {"output_regex": r"ANSWER=(\w)"}}
    path.write_text(json.dumps(mine) + "\n", encoding="utf-8")
    (own,) = load_task_file(path, "mcqa").tasks
    assert own.metadata["template_metadata"] == {"output_regex": r"ANSWER=(\w)"}  # the row's own wins


@pytest.mark.parametrize(("constraint", "good", "bad"), [
    ({"kind": "keywords:frequency", "keyword": "cat", "frequency": 2, "relation": "at least"}, "cat cat", "cat"),
    ({"kind": "keywords:letter_frequency", "letter": "z", "let_frequency": 2, "let_relation": "less than"}, "zoo",
     "zzz"),
    ({"kind": "change_case:capital_word_frequency", "capital_frequency": 1, "capital_relation": "at least"},
     "an URGENT note", "a quiet note"),
])
def test_nemo_instruction_ids_with_a_subject_and_a_relation(constraint: dict[str, Any], good: str, bad: str) -> None:
    assert C.check(constraint, good)[0] and not C.check(constraint, bad)[0]
    assert compose([constraint]) is not None or constraint["kind"] == "keywords:letter_frequency"


def test_the_table_names_every_resources_server_the_installed_wheel_ships() -> None:
    import runpy

    locator = runpy.run_path(str(Path(__file__).resolve().parents[1] / "fixtures" / "nemo_gym.py"))
    why = locator["missing"]()
    if why:
        pytest.skip(f"nemo-gym: {why}")
    (servers,) = locator["venv_dir"]().glob("lib/python3*/site-packages/resources_servers")
    shipped = {p.parent.parent.name for p in servers.glob("*/data/example*.jsonl")}
    assert shipped <= set(nemo_gym_families.FAMILIES), sorted(shipped - set(nemo_gym_families.FAMILIES))
