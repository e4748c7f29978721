from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

from palaestra.core.errors import InvalidTask, VerifierError
from palaestra.core.records import Task, Trajectory
from palaestra.envs.math_env.checker import last_boxed
from palaestra.envs.math_env.env import MathEnv
from palaestra.envs.math_env.pool import WorkerPool

READY = "import sys, json; print(json.dumps({'ready': True}), flush=True); "


def _fake_pool(script: str) -> WorkerPool:
    """A real child process standing in for the math worker, to drive the pool's failure paths."""
    return WorkerPool("unused", workers=1, startup_timeout=20, argv=[sys.executable, "-c", script])


def _task(expected: str) -> Task:
    return Task(id="m", env="math", input="Compute it.", metadata={"expected_answer": expected})


def _say(text: str) -> Trajectory:
    return Trajectory(messages=[{"role": "assistant", "content": text}], final_answer=text)


async def test_bundled_tasks_reference_scores_one_and_null_scores_zero() -> None:
    env = MathEnv()
    tasks = env.examples()
    assert len(tasks) >= 20
    for task in tasks:
        env.check_task(task)
        ref = env.reference(task)
        verdict = await env.verify(env.seed(task), _say(ref.final_answer or ""))
        assert verdict.reward == 1.0 and verdict.passed, (task.id, verdict)
        null = await env.verify(env.seed(task), Trajectory(final_answer=""))
        assert null.reward == 0.0 and null.metadata["reason"] == "empty_response", task.id


@pytest.mark.parametrize(
    ("expected", "answer", "correct"),
    [
        ("\\frac{1}{2}", "0.5", True),
        ("0.5", "So the result is \\boxed{\\frac{1}{2}}.", True),
        ("\\frac{3}{4}", "\\boxed{3/4}", True),
        ("\\sqrt{2}", "\\boxed{2^{1/2}}", True),
        ("5\\sqrt{2}", "\\boxed{\\sqrt{50}}", True),
        ("x^2 + 5x + 6", "\\boxed{(x+2)(x+3)}", True),
        ("1000", "\\boxed{1,000}", True),
        ("124", "Adding them, the answer is 124.", True),
        ("124", "Adding them gives 124.", False),  # a number in passing is not a committed answer
        ("5", "First I thought \\boxed{3}, but in fact \\boxed{5}", True),
        ("5", "\\boxed{5} ... no: \\boxed{3}", False),
        ("124", "\\boxed{123}", False),
        ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}}", False),
    ],
)
async def test_equivalence(expected: str, answer: str, correct: bool) -> None:
    verdict = await MathEnv().verify(_task(expected), _say(answer))
    assert verdict.passed is correct and verdict.reward == (1.0 if correct else 0.0)
    assert verdict.components == {"correct": verdict.reward}


async def test_answer_and_reasons_are_reported() -> None:
    env = MathEnv()
    boxed = await env.verify(_task("7"), _say("x = \\boxed{7}"))
    assert boxed.answer == "7" and boxed.metadata["extracted_from"] == "boxed"
    wrong = await env.verify(_task("7"), _say("\\boxed{8}"))
    assert wrong.metadata["reason"] == "not_equivalent" and wrong.answer == "8"
    nothing = await env.verify(_task("7"), _say("I cannot solve this."))
    assert nothing.reward == 0.0 and nothing.metadata["reason"] == "no_committed_answer"


async def test_verdict_is_deterministic_and_concurrent_calls_agree() -> None:
    env = MathEnv()
    cases = [("\\frac{1}{2}", "\\boxed{0.5}"), ("3", "\\boxed{4}")] * 6
    results = await asyncio.gather(*(env.verify(_task(e), _say(a)) for e, a in cases))
    assert [r.reward for r in results] == [1.0, 0.0] * 6


def test_last_boxed_balances_braces_and_skips_empty_boxes() -> None:
    assert last_boxed("\\boxed{\\frac{1}{2}} and \\boxed{\\sqrt{x^{2}}} \\boxed{}") == "\\sqrt{x^{2}}"
    assert last_boxed("no box here") is None


async def test_timeout_is_a_verifier_failure_and_the_pool_recovers() -> None:
    # A zero deadline always trips (a 1e-6 s one can lose the race to a sub-millisecond check).
    impatient = MathEnv(verify_timeout=0)
    with pytest.raises(VerifierError, match="verify_timeout=0s"):
        await impatient.verify(_task("\\frac{1}{2}"), _say("\\boxed{0.5}"))
    # The overrunning worker was killed; the next check gets a fresh one and is right again.
    assert (await MathEnv().verify(_task("\\frac{1}{2}"), _say("\\boxed{0.5}"))).reward == 1.0


async def test_hanging_check_is_cut_off_and_its_worker_killed() -> None:
    pool = _fake_pool(READY + "import time\nfor line in sys.stdin: time.sleep(600)")
    env = MathEnv(verify_timeout=0.5, pool=pool)
    try:
        started = time.monotonic()
        with pytest.raises(VerifierError, match="did not finish"):
            await env.verify(_task("x"), _say("\\boxed{x}"))
        assert time.monotonic() - started < 60
        assert pool.pids() == []  # the hung worker is gone, not left spinning
    finally:
        pool.shutdown()


async def test_worker_crash_raises_verifier_error() -> None:
    pool = _fake_pool(READY + "sys.stdin.readline(); sys.exit(3)")
    with pytest.raises(VerifierError, match="died"):
        await MathEnv(pool=pool).verify(_task("x"), _say("\\boxed{x}"))
    pool.shutdown()


async def test_worker_that_cannot_start_raises_verifier_error() -> None:
    pool = _fake_pool("import sys; sys.exit(2)")
    with pytest.raises(VerifierError, match="failed to start"):
        await MathEnv(pool=pool).verify(_task("x"), _say("\\boxed{x}"))


async def test_check_that_raises_is_a_verifier_error_not_a_zero() -> None:
    script = READY + "\nfor line in sys.stdin: print(json.dumps({'error': 'KeyError: boom'}), flush=True)"
    pool = _fake_pool(script)
    with pytest.raises(VerifierError, match="boom"):
        await MathEnv(pool=pool).verify(_task("x"), _say("\\boxed{x}"))
    pool.shutdown()


async def test_a_dead_idle_worker_is_replaced() -> None:
    env = MathEnv()
    assert (await env.verify(_task("\\frac{1}{2}"), _say("\\boxed{0.5}"))).reward == 1.0
    assert env.pool.pids()  # a non-integer answer went through a worker
    for pid in env.pool.pids():
        os.kill(pid, 9)
    await asyncio.sleep(0.05)
    assert (await env.verify(_task("\\frac{1}{2}"), _say("\\boxed{0.5}"))).reward == 1.0


async def test_unparseable_expected_answer_is_a_verifier_error() -> None:
    with pytest.raises(VerifierError, match="expected_answer"):
        await MathEnv().verify(_task("$ $"), _say("\\boxed{1}"))


def test_negative_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="verify_timeout"):
        MathEnv(verify_timeout=-1)


def test_missing_expected_answer_is_an_invalid_task() -> None:
    with pytest.raises(InvalidTask, match="expected_answer"):
        MathEnv().check_task(Task(id="x", input="1+1?"))


def test_info_names_the_env_math() -> None:
    info = MathEnv().info()
    assert info["name"] == "math" and info["tools"] == []
