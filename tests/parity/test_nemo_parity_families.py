"""Verdict parity with NeMo Gym for the native families whose replies are tool calls or tagged answers:
structured outputs, tool-call argument comparison (three servers), reasoning-gym, BunsenBench and PolyMath.

As in ``test_nemo_parity.py``, NeMo Gym's verdict comes from its own verifier imported from the installed
wheel (``nemo_driver.py`` in NeMo Gym's interpreter) and Palaestra's from its environment on the same row
as ``palaestra.rollout.tasks`` loads it. Here a case is a Responses ``output`` list (assistant messages
and ``function_call`` items), so the very same response reaches both: NeMo Gym reads it as its verify
request's ``response``; Palaestra reads it through ``nemo_gym_face.trajectory_from_response``, the
path by which the NeMo Gym face grades NeMo Gym's own rollouts. Cases are every published example row
× generated replies: the gold answer, near misses (a wrong value, a missing or extra field, wrong tool,
extra calls, arguments that are no JSON, casing, tags, boxes) and malformed replies.

A row Palaestra refuses at load (``InvalidTask``: a YAML schema, a call that does not fit its tool's
schema) is counted as refused, never as agreement. Agreement must be at least 99 % per family where
Palaestra reads replies as NeMo Gym does; every other difference must be one listed in
``EXPECTED_DIFFERENCES`` (and in docs/nemo_gym_parity.md, with the reason).
``python tests/parity/test_nemo_parity_families.py`` prints the table and every difference.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import runpy
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from palaestra.adapters.nemo_gym_face import trajectory_from_response
from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask
from palaestra.envs.json_schema.env import JSONSchema
from palaestra.envs.math_env.env import MathEnv
from palaestra.envs.mcqa.env import MCQA
from palaestra.envs.reasoning_gym.env import ReasoningGym
from palaestra.envs.tool_call.env import ToolCallEnv
from palaestra.rollout.tasks import parse_row

HERE = Path(__file__).resolve().parent
SIDE = SimpleNamespace(**runpy.run_path(str(HERE / "nemo_side.py")))  # NeMo Gym's rows and verdicts
R = SimpleNamespace(**runpy.run_path(str(HERE / "nemo_replies.py")))  # the generated replies
THRESHOLD = 0.99
Output = list[dict[str, Any]]


# ---- families ---------------------------------------------------------------------------------------------

def _multireward_correct(nemo: dict[str, Any]) -> float:
    """NeMo Gym's example_tool_call_multireward sums three components (0-3); its ``correctness`` component
    is the question Palaestra's own tool_call reading answers (the expected call made), so with nemo_compat
    off it is the one compared. ``format`` (no prose beside the call) and ``schema_valid`` have no
    counterpart there."""
    return float(nemo["correctness"])


_PARTS = ("correctness", "schema_valid", "format")


def _multireward_all(nemo: dict[str, Any]) -> tuple[float, ...]:
    """With nemo_compat on, Palaestra gives NeMo Gym's reward (the sum) and its three components: all four
    are compared."""
    return (float(nemo["reward"]), *(float(nemo[k]) for k in _PARTS))


def _multireward_ours(verdict: Any) -> tuple[float, ...]:
    return (float(verdict.reward), *(float(verdict.components[k]) for k in _PARTS))


def _passed(verdict: Any) -> float:
    """Palaestra's tool_call and json_schema rewards give partial credit (the fraction of calls matched; the
    mean of parse, schema and values); NeMo Gym's servers answer 1 or 0, so the comparable verdict is
    Palaestra's ``passed`` (every part right)."""
    return 1.0 if verdict.is_pass() else 0.0


def _reward(verdict: Any) -> float:
    return float(verdict.reward)


def _tool_call(compat: bool) -> Environment:
    return ToolCallEnv(nemo_compat=compat)


@dataclass(frozen=True)
class Family:
    server: str
    env: str
    cases: Callable[[dict[str, Any]], list[tuple[str, Output]]]
    make: Callable[[bool], Environment]  # nemo_compat -> the environment
    switch: bool = True  # the environment has a nemo_compat reading; False: one reading, compared as it is
    files: str = "example*.jsonl"  # the server's published example files
    gold: tuple[str, ...] = ("gold",)  # the variant(s) that give the right answer in the row's form
    theirs: Callable[[dict[str, Any]], Any] = lambda nemo: float(nemo["reward"])
    ours: Callable[[Any], Any] = _reward
    # what is compared with nemo_compat on, where it is more than with it off (None: the same)
    theirs_compat: Callable[[dict[str, Any]], Any] | None = None
    ours_compat: Callable[[Any], Any] | None = None


FAMILIES: dict[str, Family] = {
    "structured_outputs": Family("structured_outputs", "json_schema", R.structured_cases,
                                 lambda compat: JSONSchema(nemo_compat=compat), gold=("tool_gold", "text_gold"),
                                 ours=_passed, files="*example*.jsonl"),  # also its v3 (text) and v4 examples
    "single_step_tool_use_with_argument_comparison": Family(
        "single_step_tool_use_with_argument_comparison", "tool_call", R.single_step_cases, _tool_call,
        gold=("gold", "message"), ours=_passed, ours_compat=_reward),
    "xlam_fc": Family("xlam_fc", "tool_call", R.xlam_cases, _tool_call, ours=_passed, ours_compat=_reward),
    "example_tool_call_multireward": Family("example_tool_call_multireward", "tool_call", R.multireward_cases,
                                            _tool_call, theirs=_multireward_correct, ours=_passed,
                                            theirs_compat=_multireward_all, ours_compat=_multireward_ours),
    "reasoning_gym": Family("reasoning_gym", "reasoning_gym", R.reasoning_gym_cases,
                            lambda compat: ReasoningGym(nemo_compat=compat), gold=("answer_tags",)),
    "bunsenbench_chemistry_mcq": Family("bunsenbench_chemistry_mcq", "mcqa", R.bunsen_cases,
                                        lambda compat: MCQA(nemo_compat=compat), gold=("choice_text",)),
    "polymath": Family("polymath", "math", R.polymath_cases,
                       lambda compat: MathEnv(nemo_compat=compat, verify_timeout=300.0), gold=("boxed",)),
}

# Variants where Palaestra knowingly reads a reply otherwise than NeMo Gym, per family, with the reason
# (docs/nemo_gym_parity.md says the same). A difference not listed here fails the test.
_SURPLUS = ("a surplus call beside the expected one(s): NeMo Gym (parallel_tool_call_rewarding off, its "
            "default) does not count surplus calls; Palaestra passes only exactly the expected calls")
_FUZZY = ("a string argument changed (words appended or dropped, case swapped): NeMo Gym compares strings by "
          "word-count similarity (threshold 0.1 in its shipped config) and accepts it; Palaestra compares exactly")
_EXTRA_ARG = ("an argument the expected call lacks: NeMo Gym checks only the expected keys; Palaestra refuses "
              "arguments beyond them (allow_extra_arguments off)")
_BUNSEN_FORMS = ("NeMo Gym's BunsenBench reader takes any answer form (Answer: lines, bold or not, boxes with or "
                 "without \\text, <answer> and <final_answer> tags, 'the answer is', 'I choose option B', the option "
                 "text, its letter or 'B) text' alone on the last or first line); Palaestra reads the <choice> form "
                 "the rows ask for, and a boxed letter")
EXPECTED_DIFFERENCES: dict[str, dict[str, str]] = {
    "structured_outputs": {
        "tool_gold_twice": "the answer tool called twice: Palaestra grades the last call; NeMo Gym scores any reply "
                           "with more than one function_call 0 (multiple_tool_calls)",
        "distractor_then_gold": "a distractor tool called before the answer tool: Palaestra grades the answer tool's "
                                "call; NeMo Gym scores 0 (multiple_tool_calls)",
        "text_fenced": "a ```json fenced block: Palaestra reads the block; NeMo Gym parses only the whole reply",
        "text_prose_then_json": "prose, then the JSON: Palaestra reads the embedded object; NeMo Gym parses only the "
                                "whole reply",
        "text_missing_field": "a property the schema leaves optional, left out: Palaestra validates the schema as "
                              "written; NeMo Gym first makes every declared property required",
    },
    "single_step_tool_use_with_argument_comparison": {
        "gold_plus_duplicate": _SURPLUS, "gold_plus_other_tool": _SURPLUS,
        "wrong_value": _FUZZY, "string_case_changed": _FUZZY, "words_dropped": _FUZZY,
    },
    "xlam_fc": {"extra_argument": _EXTRA_ARG},
    "example_tool_call_multireward": {
        "extra_argument": _EXTRA_ARG,
        "gold_plus_duplicate": "the expected call made twice: NeMo Gym's correctness is 'some call matches' (its "
                               "format component is what costs); Palaestra passes only exactly one call",
    },
    "reasoning_gym": {
        "tags_upper": "<ANSWER>...</ANSWER>: Palaestra reads the tags in any case; reasoning-gym's extract_answer "
                      "(NeMo Gym's) only lowercase ones, so NeMo Gym scores the whole reply",
        "boxed": "\\boxed{answer} without tags: NeMo Gym falls back to the box; Palaestra scores the whole reply",
    },
    "polymath": {
        "last_box_wins": "the last box is the answer; NeMo Gym hands the whole reply to math-verify, which reads "
                         "\\boxed{5} ... \\boxed{4} as the set {4, 5} (as for math_with_judge)",
        "no_box": "'Answer: 4' commits to 4; NeMo Gym scores 0 without a box (as for math_with_judge)",
    },
    "bunsenbench_chemistry_mcq": {
        "choice_lower": "<choice>h2o</choice>: the case is off, but only one option (H2O) can be meant, so "
                        "Palaestra reads it; NeMo Gym requires the case always. Where the case tells options "
                        "apart (CO, Co) Palaestra requires it too",
        **{v: _BUNSEN_FORMS for v in ("answer_colon_text", "answer_colon_letter", "boxed_text", "answer_tag",
                                      "plain_text", "letter_alone", "the_answer_is", "answer_bold",
                                      "answer_lower_letter", "option_word", "label_text", "final_answer_tag",
                                      "boxed_text_wrapper", "restated_choices", "letter_first_line")},
    },
}


# ---- the comparison ---------------------------------------------------------------------------------------

@dataclass
class Comparison:
    family: str
    compat: bool
    rows: int = 0
    refused: dict[str, str] = field(default_factory=dict)
    variants: set[str] = field(default_factory=set)
    cases: int = 0
    agree: int = 0
    differences: list[dict[str, Any]] = field(default_factory=list)
    gold_full: int = 0  # rows whose gold reply both sides score in full

    @property
    def agreement(self) -> float:
        return self.agree / self.cases if self.cases else 0.0


async def _verdict(env: Environment, task: Any, row: dict[str, Any], output: Output) -> Any:
    state = env.seed(task)
    if inspect.isawaitable(state):
        state = await state
    verdict = env.verify(state, trajectory_from_response(row, {"output": output}))
    return await verdict if inspect.isawaitable(verdict) else verdict


@functools.cache
def nemo_side(name: str) -> tuple[int, dict[bool, dict[str, str]], list[tuple[str, dict[str, Any], Any, str, Output]],
                                  list[dict[str, Any]]]:
    """(rows, refused at load per nemo_compat setting, cases, NeMo Gym's verdict per case) of a family:
    computed once for both readings of Palaestra's side. A row either setting loads has cases."""
    family = FAMILIES[name]
    envs = {compat: family.make(compat) for compat in ((False, True) if family.switch else (False,))}
    refused: dict[bool, dict[str, str]] = {compat: {} for compat in envs}
    loaded: list[tuple[str, dict[str, Any], Any]] = []
    rows = SIDE.example_rows(family.server, family.files)
    for i, (fname, row) in enumerate(rows):
        where = f"{fname}#{i}"
        try:
            task = parse_row(row, f"{family.server}-{i}", family.env)
        except ValueError as exc:
            for compat in envs:
                refused[compat][where] = str(exc)[:160]
            continue
        for compat, env in envs.items():
            try:
                env.check_task(task)
            except InvalidTask as exc:
                refused[compat][where] = str(exc)[:160]
        if any(where not in r for r in refused.values()):
            loaded.append((where, row, task))
    meta = [(where, row, task, variant, output) for where, row, task in loaded
            for variant, output in family.cases(row)]
    nemo = SIDE.nemo_rewards([{"server": family.server, "row": row, "output": output}
                              for _, row, _, _, output in meta])
    return len(rows), refused, meta, nemo


def compare(name: str, compat: bool) -> Comparison:
    family = FAMILIES[name]
    env = family.make(compat)
    rows, refused_by, meta, nemo = nemo_side(name)
    refused = refused_by[compat]
    result = Comparison(name, compat, rows=rows, refused=refused)

    ours = (family.ours_compat if compat else None) or family.ours
    theirs_of = (family.theirs_compat if compat else None) or family.theirs

    async def score() -> None:
        for (where, row, task, variant, output), theirs in zip(meta, nemo, strict=True):
            if where in refused:
                continue
            assert "error" not in theirs, f"NeMo Gym refused {where} / {variant}: {theirs['error']}"
            verdict = await _verdict(env, task, row, output)
            mine, other = ours(verdict), theirs_of(theirs)
            result.variants.add(variant)
            result.cases += 1
            result.gold_full += variant in family.gold and family.ours(verdict) == family.theirs(theirs) == 1.0
            if mine == other:
                result.agree += 1
            else:
                result.differences.append({"row": where, "variant": variant, "nemo_gym": theirs,
                                           "palaestra": {"reward": verdict.reward, "passed": verdict.is_pass(),
                                                         "metadata": verdict.metadata}})

    asyncio.run(score())
    return result


SETTINGS = [(name, compat) for name in sorted(FAMILIES) for compat in ((True, False) if FAMILIES[name].switch
                                                                        else (False,))]


@pytest.fixture(scope="module", params=SETTINGS, ids=[f"{n}-{'compat' if c else 'default'}" for n, c in SETTINGS])
def comparison(request: pytest.FixtureRequest) -> Comparison:
    reason = SIDE.NG.missing()
    if reason is not None:
        pytest.skip(f"nemo-gym: {reason}")  # the capability name PALAESTRA_REQUIRE knows (tests/conftest.py)
    return compare(*request.param)


@pytest.mark.timeout(900)
def test_the_gold_reply_scores_in_full_on_both_sides(comparison: Comparison) -> None:
    """The generated cases mean something: on every row both sides load, the gold reply is right for both."""
    assert comparison.rows >= 5 and comparison.cases >= 8 * (comparison.rows - len(comparison.refused))
    gold = set(FAMILIES[comparison.family].gold)
    assert gold & comparison.variants, comparison.variants
    assert comparison.gold_full == comparison.rows - len(comparison.refused), comparison.differences[:5]


@pytest.mark.timeout(900)
def test_nemo_compat_agrees_and_every_other_difference_is_documented(comparison: Comparison) -> None:
    """With nemo_compat on, a family whose environment has that reading agrees at least 99 %. Read
    Palaestra's way (or where there is one reading only), every difference is one listed in
    ``EXPECTED_DIFFERENCES`` with its reason."""
    if comparison.compat:
        assert comparison.agreement >= THRESHOLD, (
            f"{comparison.family}: {comparison.agreement:.1%} agreement with nemo_compat on; differences:\n"
            + "\n".join(json.dumps(d)[:600] for d in comparison.differences[:20]))
        return
    expected = EXPECTED_DIFFERENCES.get(comparison.family, {})
    undocumented = [d for d in comparison.differences if d["variant"] not in expected]
    assert not undocumented, (f"{comparison.family}: {comparison.agreement:.1%} agreement; differences not in "
                              "docs/nemo_gym_parity.md:\n" + "\n".join(json.dumps(d)[:600] for d in undocumented[:20]))


def main() -> None:
    reason = SIDE.NG.missing()
    if reason is not None:
        sys.exit(f"nemo-gym: {reason}")
    names = sys.argv[1:] or list(FAMILIES)
    print("| family | env | rows | refused at load | variants | cases | agreement, nemo_compat on | agreement, off |")
    print("|---|---|---|---|---|---|---|---|")
    done = [(compare(n, True) if FAMILIES[n].switch else None, compare(n, False)) for n in names]
    for on, off in done:
        rate = f"{on.agreement:.1%} ({on.agree}/{on.cases})" if on else "no switch"
        refused = f"{len(off.refused)}" if on is None or on.refused == off.refused else \
            f"{len(on.refused)} on, {len(off.refused)} off"
        print(f"| {off.family} | {FAMILIES[off.family].env} | {off.rows} | {refused} | {len(off.variants)} | "
              f"{off.cases} | {rate} | {off.agreement:.1%} ({off.agree}/{off.cases}) |")
    for pair in done:
        for c in (x for x in pair if x is not None):
            print(f"\n{c.family} (nemo_compat {'on' if c.compat else 'off'}): refused {c.refused}")
            print(f"differences by variant {dict(Counter(d['variant'] for d in c.differences))}")
            for d in c.differences:
                print("  ", json.dumps(d)[:1200])


if __name__ == "__main__":
    main()
