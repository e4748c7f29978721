"""The math answer check. ``check_answer`` runs inside a worker process (see ``pool.py``); it imports
math-verify lazily so the server process never loads sympy at all."""

from __future__ import annotations

import logging
import sys
from typing import Any

from palaestra.envs.math_env.answer import last_boxed

__all__ = ["as_latex", "check_answer", "init_worker", "last_boxed", "warmup"]

# Python refuses int <-> str conversions past 4,300 digits (a guard against quadratic-time parsing).
# Inputs reaching a worker are bounded by MathEnv(max_symbolic_chars=...), so the worker may convert
# numbers up to this many digits; plain integers never come here (they are compared as digit strings).
WORKER_INT_DIGITS = 20_000


def as_latex(answer: str) -> str:
    """Gold answers are bare LaTeX or numbers; box them so math-verify reads them as one expression."""
    answer = answer.strip()
    if "$" in answer or "\\boxed" in answer:
        return answer
    return f"\\boxed{{{answer}}}"


def init_worker() -> None:
    """Import math-verify once per worker, and silence its notice that we disabled its own timeouts
    (the pool enforces the deadline; math-verify's SIGALRM timeouts would make verdicts load-dependent)."""
    import math_verify  # noqa: F401

    sys.set_int_max_str_digits(WORKER_INT_DIGITS)
    logging.getLogger("math_verify").setLevel(logging.ERROR)


def warmup() -> bool:
    """Run one tiny check so sympy's and the LaTeX parser's lazy set-up happens before real work."""
    return bool(check_answer("1", "\\boxed{1}")["correct"])


def check_answer(gold: str, pred: str) -> dict[str, Any]:
    """Compare ``pred`` (a boxed answer or free text) with the gold answer.

    Returns ``{"status": "ok", "correct": bool, "parsed": str}``, or ``status`` ``"unparsed"`` when no
    answer could be read from ``pred``, or ``"bad_gold"`` when the task's expected answer is unreadable.
    """
    from math_verify import parse, verify

    gold_parsed = parse(as_latex(gold), parsing_timeout=None)
    if not gold_parsed:
        return {"status": "bad_gold", "correct": False, "parsed": None}
    pred_parsed = parse(pred, parsing_timeout=None)
    if not pred_parsed:
        return {"status": "unparsed", "correct": False, "parsed": None}
    correct = verify(gold_parsed, pred_parsed, timeout_seconds=None)
    shown = pred_parsed[-1] if isinstance(pred_parsed[-1], str) else pred_parsed[0]
    return {"status": "ok", "correct": bool(correct), "parsed": str(shown)}
