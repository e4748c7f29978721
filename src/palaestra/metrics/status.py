"""The honest verdict on a run as a whole, from its metrics: complete, incomplete or failed, the exit code
the CLI gives it, and what to do about each kind of failure it had. Kept apart from ``summary`` (which
computes the metrics) because every caller that judges a run (``eval run``, ``reverify``, the Python API)
reads only these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ADVICE", "EXIT_FAILED", "EXIT_INCOMPLETE", "EXIT_OK", "RunStatus", "run_status"]

# What to do about each failure kind, shown under a run's summary. ``{model}`` is the model spec.
ADVICE: dict[str, str] = {
    "model": "is the model server at {model} up and serving that model? Check --model, --model-name and the "
             "API key (--api-key-env / --api-key-file)",
    "environment": "the environment could not seed or verify: read the message; `palaestra env check ENV` "
                   "runs its conformance suite",
    "sandbox": "the sandbox could not start or run a program: `palaestra sandbox info` shows what this "
               "machine provides",
    "agent": "the agent harness failed: check --agent and --max-steps, and the message above",
    "verifier": "the verifier could not run: `palaestra env check ENV` shows whether it works here",
    "judge": "is the judge model reachable? Check the environment's judge model setting",
    "timeout": "rollouts ran past the deadline: raise --deadline or lower --concurrency",
    # an environment failure whose message starts "invalid_task:": the row, not the infrastructure
    "scripted": "a scripted model failed as it was told to (failure_rate) or cannot answer this environment: "
                "check --model",
    "invalid_task": "the environment refused the row at run time (not retried): fix the row the message "
                    "names, or the environment's check_task so that it catches such rows before a run starts",
}

EXIT_OK, EXIT_INCOMPLETE, EXIT_FAILED = 0, 3, 4


@dataclass
class RunStatus:
    """The honest verdict on a run as a whole: ``complete`` (coverage at least ``min_coverage`` and
    something scored), ``incomplete`` (some slots failed, below ``min_coverage``) or ``failed`` (no
    rollout scored). ``exit_code`` is what the CLI exits with: 0, 3 or 4."""

    status: str
    exit_code: int
    coverage: float | None
    min_coverage: float
    n_scored: int
    n_expected: int | None
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The summary's closing lines: the verdict, then each failure kind with an example and advice."""
        cov = "–" if self.coverage is None else f"{100 * self.coverage:.1f}%"
        head = {"complete": f"complete: {self.n_scored} rollouts scored, coverage {cov}",
                "incomplete": f"INCOMPLETE: coverage {cov} is below --min-coverage {100 * self.min_coverage:.1f}%",
                "failed": "FAILED: no rollout was scored"}[self.status]
        out = [head]
        for kind, info in self.failures.items():
            out.append(f"  failed({kind}) × {info['count']}, e.g. task {info['task_id']}: {info['message']}")
            key = kind
            if str(info["message"]).startswith("invalid_task:"):
                key = "invalid_task"
            elif kind == "model" and str(info.get("model") or "").startswith("scripted:"):
                key = "scripted"
            advice = ADVICE.get(key)
            if advice:
                out.append("    what to do: " + advice.format(model=info.get("model") or "--model"))
        return out


def run_status(metrics: Mapping[str, Any], min_coverage: float = 1.0) -> RunStatus:
    """Judge a run from its metrics: failed when nothing scored, incomplete when coverage is short."""
    overall = metrics.get("overall") or {}
    n_scored = int(overall.get("n_rollouts_scored") or 0)
    coverage = overall.get("coverage")
    failures = dict(metrics.get("failure_examples") or {})
    if n_scored == 0:
        status, code = "failed", EXIT_FAILED
    elif coverage is not None and coverage < min_coverage - 1e-12:
        status, code = "incomplete", EXIT_INCOMPLETE
    else:
        status, code = "complete", EXIT_OK
    return RunStatus(status, code, coverage, min_coverage, n_scored, overall.get("n_expected"), failures)
