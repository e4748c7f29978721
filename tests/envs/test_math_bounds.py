"""math: only the committed answer is graded, big integers are exact, inputs are bounded, and a
verifier that runs out of time is failed(verifier) through the real runner, never a 0."""

from __future__ import annotations

import pytest

from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.errors import VerifierError
from palaestra.core.records import Task, Trajectory
from palaestra.envs.math_env.answer import committed_answer, plain_integer
from palaestra.envs.math_env.env import MathEnv
from palaestra.models.scripted import ScriptedBackend
from palaestra.placement import mount_env
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

AMBIGUOUS = "ambiguous"


def _task(expected: str) -> Task:
    return Task(id="m", env="math", input="Compute it.", metadata={"expected_answer": expected})


def _say(text: str) -> Trajectory:
    return Trajectory(messages=[{"role": "assistant", "content": text}], final_answer=text)


# reply text -> the committed answer, AMBIGUOUS, or None (nothing committed)
HOSTILE: list[tuple[str, str | None]] = [
    ("\\boxed{5}", "5"),
    ("First \\boxed{3}, but in fact \\boxed{5}", "5"),
    ("\\boxed{\\frac{1}{2}} and \\boxed{}", "\\frac{1}{2}"),
    ("\\boxed{3 \\text{ or } 5}", AMBIGUOUS),
    ("The answer is 3 or 5", AMBIGUOUS),
    ("Answer: 3\n\nChecking again...\n\nAnswer: 4", "4"),
    ("The final answer is $\\frac{1}{2}$.", "\\frac{1}{2}"),
    ("**Answer:** 12", "12"),
    ("Adding them gives 124, so we are done.", None),
    ("I get 3, or maybe 5, not sure.", None),
    ("Step 1: 2+2=4\nStep 2: 4*3=12\n\n12", "12"),
    ("Step 1 gives x.\n$x = \\frac{3}{4}$", "x = \\frac{3}{4}"),
    ("I cannot solve this.", None),
    ("\\boxed{" * 20_000 + "7}", "7"),
    ("", None),
]


@pytest.mark.parametrize(("text", "want"), HOSTILE)
def test_committed_answer_table(text: str, want: str | None) -> None:
    found = committed_answer(text)
    if want == AMBIGUOUS:
        assert found.text is None and found.reason == AMBIGUOUS, found
    else:
        assert found.text == want, found
        if want is None:
            assert found.reason in ("no_committed_answer", "empty_response"), found


def test_alternatives_are_an_answer_when_the_gold_has_them() -> None:
    assert committed_answer("\\boxed{x=2 \\text{ or } x=3}", alternatives_allowed=True).text == "x=2 \\text{ or } x=3"


@pytest.mark.parametrize(
    ("text", "digits"),
    [("1,000", "1000"), ("1\\,000", "1000"), ("1{,}000", "1000"), ("+007", "7"), ("$-12$", "-12"), ("-0", "0"),
     ("12,34", None), ("1.5", None), ("x", None), ("10^{3}", None)],
)
def test_plain_integers(text: str, digits: str | None) -> None:
    assert plain_integer(text) == digits


@pytest.mark.parametrize("n_digits", [5_000, 50_000])
async def test_big_integer_answers_are_compared_exactly(n_digits: int) -> None:
    gold = "9" + "0123456789" * (n_digits // 10 - 1) + "012345678"
    assert len(gold) == n_digits
    env = MathEnv()
    right = await env.verify(_task(gold), _say(f"The final answer is \\boxed{{{gold}}}."))
    assert right.reward == 1.0 and right.passed and right.answer == gold
    assert right.metadata["compared_as"] == "integer"
    bare = await env.verify(_task(gold), _say(gold))
    assert bare.reward == 1.0
    wrong = await env.verify(_task(gold), _say(f"\\boxed{{{gold[:-1]}9}}"))
    assert wrong.reward == 0.0 and wrong.metadata["reason"] == "not_equivalent"
    short = await env.verify(_task(gold), _say(f"\\boxed{{{gold[:-1]}}}"))
    assert short.reward == 0.0 and short.metadata["reason"] == "not_equivalent"


async def test_answers_and_gold_past_the_bounds_are_verifier_errors_not_zeros() -> None:
    env = MathEnv(max_answer_chars=1_000, max_symbolic_chars=200)
    with pytest.raises(VerifierError, match=r"answer_too_long.*max_answer_chars=1,000"):
        await env.verify(_task("7"), _say("\\boxed{" + "1" * 1_001 + "}"))
    with pytest.raises(VerifierError, match=r"answer_too_long.*max_symbolic_chars=200"):
        await env.verify(_task("\\frac{1}{2}"), _say("\\boxed{" + "1+" * 150 + "1}"))
    with pytest.raises(VerifierError, match="max_answer_chars"):
        await env.verify(_task("1" * 1_001), _say("\\boxed{1}"))
    with pytest.raises(VerifierError, match="max_symbolic_chars"):
        await env.verify(_task("x^{" + "1" * 300 + "}"), _say("\\boxed{1}"))


async def test_a_verifier_timeout_is_failed_verifier_through_the_runner() -> None:
    env = MathEnv(verify_timeout=0)  # a zero deadline always trips
    mounted = await mount_env(env, "inprocess")
    try:
        rollout = await run_rollout(_task("\\frac{1}{2}"), env=mounted.client, agent=ToolAgent(),
                                    proxy=ModelProxy(ScriptedBackend("constant", constant_text="\\boxed{0.5}")),
                                    model_name="scripted:constant", deadline_s=60)
    finally:
        await mounted.stop()
    assert rollout.outcome.status == "failed" and rollout.outcome.kind == "verifier"
    assert "verify_timeout" in (rollout.outcome.message or "")
    assert rollout.verdict is None
