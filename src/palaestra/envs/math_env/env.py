"""``math``: free-form maths problems whose final answer is checked for mathematical equivalence
with math-verify ("0.5" equals "\\frac{1}{2}", "2^{1/2}" equals "\\sqrt{2}").

Only the answer the reply commits to is graded (see ``answer.py``); an answer offering alternatives is
``ambiguous`` (0). Integers are compared as digit strings, so a 50,000-digit answer is exact and cheap;
everything else runs in a worker process under a deadline (see ``pool.py``). Inputs are bounded
(``max_answer_chars``, ``max_symbolic_chars``): a model answer past a bound is not graded (it may be
right): like an expected answer past it, a check that overruns ``verify_timeout`` or a verifier
that breaks raises ``VerifierError``, so the rollout is failed(verifier) and retried rather than scored.
"""

from __future__ import annotations

import atexit
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask, VerifierError
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.envs.math_env.answer import committed_answer, plain_integer
from palaestra.envs.math_env.pool import CheckTimeout, WorkerPool
from palaestra.envs.text import last_open_box

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

    def __init__(self, *, verify_timeout: float = 10.0, pool: WorkerPool | None = None,
                 max_answer_chars: int = 200_000, max_symbolic_chars: int = 10_000,
                 nemo_compat: bool = False) -> None:
        """``verify_timeout``: seconds one math-verify check may take (past it: failed(verifier));
        ``pool``: workers (default: the shared pool); ``max_answer_chars``: the longest answer read at
        all (integers are compared up to this many digits); ``max_symbolic_chars``: the longest answer
        or expected answer handed to math-verify (sympy's cost grows steeply with size);
        ``nemo_compat``: grade as NeMo Gym's math_with_judge library check does, for tasks that do not set
        ``metadata.nemo_compat`` themselves (see ``_nemo_verify``)."""
        if verify_timeout < 0:
            raise ValueError(f"MathEnv(verify_timeout={verify_timeout}): the deadline must be >= 0 seconds")
        if max_answer_chars < 1 or max_symbolic_chars < 1:
            raise ValueError("MathEnv: max_answer_chars and max_symbolic_chars must be >= 1")
        self.verify_timeout = verify_timeout
        self.max_answer_chars = max_answer_chars
        self.max_symbolic_chars = max_symbolic_chars
        self._pool = pool
        self.nemo_compat = nemo_compat

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
        if len(expected) > self.max_answer_chars:
            raise VerifierError(
                f"math task '{state.id}': expected_answer has {len(expected)} characters, more than "
                f"max_answer_chars={self.max_answer_chars}",
                hint="raise MathEnv(max_answer_chars=...) for this data set",
            )
        flag = state.metadata.get("nemo_compat")
        if flag if isinstance(flag, bool) else self.nemo_compat:
            return await self._nemo_verify(state, expected, trajectory.final_text())
        found = committed_answer(trajectory.final_text(), alternatives_allowed=" or " in expected)
        if found.text is None:
            return _verdict(False, None, reason=found.reason, expected_answer=expected,
                            **({"extracted_from": found.source} if found.source else {}))
        answer = found.text
        meta: dict[str, Any] = {"extracted_from": found.source, "expected_answer": expected}
        if len(answer) > self.max_answer_chars:
            raise self._too_long(state, len(answer), "max_answer_chars", self.max_answer_chars)
        gold_int, pred_int = plain_integer(expected), plain_integer(answer)
        if gold_int is not None and pred_int is not None:  # exact, linear, no digit limit, no worker
            correct = gold_int == pred_int
            return _verdict(correct, answer, compared_as="integer", **meta,
                            **({} if correct else {"reason": "not_equivalent"}))
        if len(expected) > self.max_symbolic_chars:
            raise VerifierError(
                f"math task '{state.id}': expected_answer has {len(expected)} characters, more than "
                f"max_symbolic_chars={self.max_symbolic_chars} (only plain integers are compared past it)",
                hint="raise MathEnv(max_symbolic_chars=...) for this data set",
            )
        if len(answer) > self.max_symbolic_chars:
            raise self._too_long(state, len(answer), "max_symbolic_chars", self.max_symbolic_chars)
        try:
            result = await self.pool.run("check_answer", expected, f"\\boxed{{{answer}}}",
                                         timeout=self.verify_timeout)
        except CheckTimeout:
            raise VerifierError(
                f"math task '{state.id}': math-verify did not finish within verify_timeout="
                f"{self.verify_timeout:g}s on an answer of {len(answer)} characters; its worker was replaced",
                hint="raise MathEnv(verify_timeout=...) if such answers are expected; the rollout is "
                     "failed(verifier), not 0",
            ) from None
        if result["status"] == "bad_gold":
            raise VerifierError(
                f"math task '{state.id}': math-verify cannot parse expected_answer {expected!r}",
                hint="write the expected answer as plain LaTeX or a number",
            )
        if result["status"] == "unparsed":
            return _verdict(False, answer, reason="no_answer_parsed", **meta)
        if not result["correct"]:
            meta["reason"] = "not_equivalent"
        return _verdict(bool(result["correct"]), answer, compared_as="math_verify", **meta)

    @staticmethod
    def _too_long(task: Task, chars: int, bound: str, limit: int) -> VerifierError:
        """An answer past a bound was not graded: it might be right (a long but equal expression), so it is
        a verifier failure naming the bound, never a wrong-answer 0."""
        return VerifierError(
            f"math task '{task.id}': answer_too_long: the answer has {chars:,} characters, more than "
            f"{bound}={limit:,}; it was not graded",
            hint=f"raise MathEnv({bound}=...) if answers this long are expected",
        )

    async def _nemo_verify(self, state: Task, expected: str, reply: str) -> Verdict:
        """NeMo Gym 0.7 math_with_judge without its judge: 0 unless the reply has a complete, non-empty
        last ``\\boxed{``; then math-verify reads the *whole* reply (so ``\\boxed{7} ... \\boxed{32}``
        is the set {7, 32}, not 32) against the expected answer stripped of ``\\(..\\)`` / ``$..$``.
        Failures stay failures (a deadline overrun or an unreadable expected answer raises
        VerifierError) where NeMo Gym scores 0."""
        if not (last_open_box(reply) or "").strip():
            return _verdict(False, None, reason="no_boxed_answer", expected_answer=expected, nemo_compat=True)
        if len(reply) > self.max_answer_chars:
            raise self._too_long(state, len(reply), "max_answer_chars", self.max_answer_chars)
        gold = expected
        if gold.startswith("\\(") and gold.endswith("\\)"):
            gold = gold[2:-2].strip()
        if gold.startswith("$") and gold.endswith("$") and len(gold) > 1:
            gold = gold[1:-1].strip()
        try:
            result = await self.pool.run("check_answer", f"\\boxed{{{gold}}}", reply, timeout=self.verify_timeout)
        except CheckTimeout:
            raise VerifierError(
                f"math task '{state.id}': math-verify did not finish within verify_timeout="
                f"{self.verify_timeout:g}s on a reply of {len(reply)} characters; its worker was replaced",
                hint="raise MathEnv(verify_timeout=...); the rollout is failed(verifier), not 0",
            ) from None
        if result["status"] == "bad_gold":
            raise VerifierError(f"math task '{state.id}': math-verify cannot parse expected_answer {expected!r}",
                                hint="write the expected answer as plain LaTeX or a number")
        correct = result["status"] == "ok" and bool(result["correct"])
        return _verdict(correct, result.get("parsed"), compared_as="math_verify", nemo_compat=True,
                        expected_answer=expected, **({} if correct else {"reason": "not_equivalent"}))

    def reference(self, task: Task) -> Reference:
        expected = str(task.metadata.get("expected_answer", "")).strip()
        return Reference(final_answer=f"The final answer is \\boxed{{{expected}}}.")
