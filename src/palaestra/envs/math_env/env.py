"""``math``: free-form maths problems whose final answer is checked for mathematical equivalence
with math-verify ("0.5" equals "\\frac{1}{2}", "2^{1/2}" equals "\\sqrt{2}").

The check runs in a worker process under a deadline (see ``pool.py``): an answer that makes sympy
hang scores 0 with reason ``verify_timeout``; a verifier that breaks raises ``VerifierError``, so the
rollout is marked failed and retried rather than scored.
"""

from __future__ import annotations

import atexit
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask, VerifierError
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.envs.math_env.checker import last_boxed
from palaestra.envs.math_env.pool import CheckTimeout, WorkerPool

_INSTRUCTION = "Solve the problem. Put your final answer in \\boxed{}."

_shared_pool: WorkerPool | None = None


def shared_pool() -> WorkerPool:
    """One pool per process, created on first use: every MathEnv instance shares its workers."""
    global _shared_pool
    if _shared_pool is None:
        _shared_pool = WorkerPool("palaestra.envs.math_env.worker", workers=2)
        atexit.register(_shared_pool.shutdown)
    return _shared_pool


def _verdict(correct: bool, answer: str | None, **metadata: Any) -> Verdict:
    score = 1.0 if correct else 0.0
    return Verdict(reward=score, passed=correct, components={"correct": score}, metadata=metadata, answer=answer)


class MathEnv(Environment):
    """Maths word and symbol problems; reward 1 when the final answer is equivalent to the expected one."""

    name = "math"
    version = "0.1"
    description = "Maths problems; the final (boxed) answer is checked for equivalence with math-verify."
    domain = "math"
    mechanism = "single-turn"
    system_prompt = _INSTRUCTION

    def __init__(self, *, verify_timeout: float = 10.0, pool: WorkerPool | None = None) -> None:
        """``verify_timeout``: seconds one check may take; ``pool``: workers (default: the shared pool)."""
        if verify_timeout < 0:
            raise ValueError(f"MathEnv(verify_timeout={verify_timeout}): the deadline must be >= 0 seconds")
        self.verify_timeout = verify_timeout
        self._pool = pool

    @property
    def pool(self) -> WorkerPool:
        return self._pool if self._pool is not None else shared_pool()

    def check_task(self, task: Task) -> None:
        expected = task.metadata.get("expected_answer")
        if expected is None or not str(expected).strip():
            raise InvalidTask(
                f"math task '{task.id}' has no metadata.expected_answer",
                hint='add the answer as LaTeX or a number, e.g. "expected_answer": "\\\\frac{1}{2}"',
            )
        if not any(str(m.get("content") or "").strip() for m in task.messages()):
            raise InvalidTask(f"math task '{task.id}' has an empty input", hint="put the problem in `input`")

    async def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        self.check_task(state)
        expected = str(state.metadata["expected_answer"]).strip()
        text = trajectory.final_text()
        if not text.strip():
            return _verdict(False, None, reason="empty_response", expected_answer=expected)
        boxed = last_boxed(text)
        source = f"\\boxed{{{boxed}}}" if boxed is not None else text
        extracted_from = "boxed" if boxed is not None else "text"
        try:
            result = await self.pool.run("check_answer", expected, source, timeout=self.verify_timeout)
        except CheckTimeout:
            return _verdict(
                False, boxed, reason="verify_timeout", timeout_s=self.verify_timeout, expected_answer=expected
            )
        if result["status"] == "bad_gold":
            raise VerifierError(
                f"math task '{state.id}': math-verify cannot parse expected_answer {expected!r}",
                hint="write the expected answer as plain LaTeX or a number",
            )
        answer = boxed if boxed is not None else result["parsed"]
        if result["status"] == "unparsed":
            return _verdict(False, answer, reason="no_answer_parsed", extracted_from=extracted_from,
                            expected_answer=expected)
        meta: dict[str, Any] = {"extracted_from": extracted_from, "expected_answer": expected}
        if not result["correct"]:
            meta["reason"] = "not_equivalent"
        return _verdict(bool(result["correct"]), answer, **meta)

    def reference(self, task: Task) -> Reference:
        expected = str(task.metadata.get("expected_answer", "")).strip()
        return Reference(final_answer=f"The final answer is \\boxed{{{expected}}}.")
