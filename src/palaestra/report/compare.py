"""``palaestra eval compare``: is run B better than run A on the same tasks, and by how much?

Two runs on the same tasks are paired data: task difficulty varies far more than the effect of a change,
so comparing two unpaired means throws most of the signal away. Each task present (and scored) in both
runs gives one difference ``d_t = score_B(t) - score_A(t)`` (score: mean reward or pass rate over that
task's counted rollouts); the estimate is the mean of ``d``, its 95% interval a paired bootstrap over
tasks, and its p-value a sign-flip permutation test (under "no difference" each ``d_t`` is as likely to
be negated; exact up to 16 tasks, Monte Carlo beyond). With more than one candidate, Holm's correction
controls the family-wise error. Tasks missing from either run are listed, never imputed.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from palaestra.report.index import JournalIndex
from palaestra.report.rundata import ReportError, load_run_info

__all__ = ["Comparison", "RunScores", "TaskDiff", "compare_runs", "holm", "paired_bootstrap_ci", "run_scores",
           "sign_flip_p"]

METRICS = ("reward", "pass")
EXACT_MAX_TASKS = 16


@dataclass
class RunScores:
    name: str
    path: Path
    scores: dict[str, tuple[float, int]]  # "env/task" -> (score, scored rollouts)
    n_slots: int
    n_scored: int


@dataclass
class TaskDiff:
    task: str
    a: float
    b: float
    n_a: int
    n_b: int

    @property
    def diff(self) -> float:
        return self.b - self.a


@dataclass
class Comparison:
    baseline: str
    candidate: str
    metric: str
    tasks: list[TaskDiff]
    only_baseline: list[str] = field(default_factory=list)
    only_candidate: list[str] = field(default_factory=list)
    mean_a: float | None = None
    mean_b: float | None = None
    mean_diff: float | None = None
    ci95: tuple[float, float] | None = None
    p_value: float | None = None
    p_holm: float | None = None
    wins: int = 0
    losses: int = 0
    ties: int = 0
    coverage: tuple[float | None, float | None] = (None, None)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "tasks"}
        out["n_paired"] = len(self.tasks)
        out["tasks"] = [{"task": t.task, "a": t.a, "b": t.b, "diff": t.diff, "n_a": t.n_a, "n_b": t.n_b}
                        for t in self.tasks]
        return out


def run_scores(run_dir: str | Path, metric: str = "reward") -> RunScores:
    """Per-task scores of a run from its journal (counted attempts only, the same rule as metrics)."""
    if metric not in METRICS:
        raise ReportError(f"unknown comparison metric {metric!r}", hint=f"use one of {', '.join(METRICS)}")
    info = load_run_info(run_dir)
    index = JournalIndex(info.journal)
    index.advance()
    per_task: dict[str, list[float]] = defaultdict(list)
    slots = scored = 0
    for row in index.rows:
        if not row.effective:
            continue
        slots += 1
        if row.scored and row.reward is not None:
            scored += 1
            per_task[f"{row.env}/{row.task_id}"].append(row.reward if metric == "reward" else float(row.is_pass))
    if info.expected:
        slots = max(slots, sum(info.expected.values()))
    path = Path(run_dir)
    return RunScores(path.resolve().name, path, {t: (float(np.mean(v)), len(v)) for t, v in per_task.items()},
                     slots, scored)


def paired_bootstrap_ci(diffs: Sequence[float], *, n_boot: int = 10_000, seed: int = 0,
                        confidence: float = 0.95) -> tuple[float, float] | None:
    """Percentile interval of the mean difference, resampling tasks with replacement (None below 2 tasks)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size < 2:
        return None
    rng = np.random.default_rng(seed)
    means = np.concatenate([d[rng.integers(0, d.size, size=(min(2000, n_boot - s), d.size))].mean(axis=1)
                            for s in range(0, n_boot, 2000)])
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def sign_flip_p(diffs: Sequence[float], *, n_perm: int = 20_000, seed: int = 0) -> float | None:
    """Two-sided p-value of a mean difference of zero, by flipping the sign of each task's difference.

    Exact (all 2^n sign patterns) up to ``EXACT_MAX_TASKS`` tasks; otherwise ``n_perm`` random patterns
    with the +1 correction, so a p-value is never reported as 0.
    """
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        return None
    observed = abs(d.mean())
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if observed <= tol:
        return 1.0
    if d.size <= EXACT_MAX_TASKS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        stats = np.abs(signs @ d) / d.size
        return float(np.mean(stats >= observed - tol))
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_perm, 2000):
        signs = rng.choice((-1.0, 1.0), size=(min(2000, n_perm - start), d.size))
        hits += int(np.sum(np.abs(signs @ d) / d.size >= observed - tol))
    return (hits + 1) / (n_perm + 1)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (None stays None and does not count as a test)."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    out: list[float | None] = [None] * len(p_values)
    m, running = len(tested), 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def _compare(a: RunScores, b: RunScores, metric: str, n_boot: int, seed: int) -> Comparison:
    common = sorted(set(a.scores) & set(b.scores))
    tasks = [TaskDiff(t, a.scores[t][0], b.scores[t][0], a.scores[t][1], b.scores[t][1]) for t in common]
    diffs = [t.diff for t in tasks]
    c = Comparison(a.name, b.name, metric, sorted(tasks, key=lambda t: (t.diff, t.task)),
                   sorted(set(a.scores) - set(b.scores)), sorted(set(b.scores) - set(a.scores)),
                   coverage=(a.n_scored / a.n_slots if a.n_slots else None,
                             b.n_scored / b.n_slots if b.n_slots else None))
    if tasks:
        c.mean_a = float(np.mean([t.a for t in tasks]))
        c.mean_b = float(np.mean([t.b for t in tasks]))
        c.mean_diff = float(np.mean(diffs))
        c.ci95 = paired_bootstrap_ci(diffs, n_boot=n_boot, seed=seed)
        c.p_value = sign_flip_p(diffs, seed=seed)
        c.wins = sum(1 for x in diffs if x > 1e-12)
        c.losses = sum(1 for x in diffs if x < -1e-12)
        c.ties = len(diffs) - c.wins - c.losses
    return c


def compare_runs(run_dirs: Sequence[str | Path], *, metric: str = "reward", n_boot: int = 10_000,
                 seed: int = 0) -> list[Comparison]:
    """Compare every run after the first against the first (the baseline), with Holm-adjusted p-values."""
    if len(run_dirs) < 2:
        raise ReportError("compare needs at least two run directories",
                          hint="palaestra eval compare BASELINE_RUN CANDIDATE_RUN [MORE_RUNS ...]")
    runs = [run_scores(d, metric) for d in run_dirs]
    names = [r.name for r in runs]
    if len(set(names)) < len(names):  # same directory name in different places: use the paths
        for r in runs:
            r.name = str(r.path)
    comparisons = [_compare(runs[0], r, metric, n_boot, seed) for r in runs[1:]]
    if len({key.split("/", 1)[0] for r in runs for key in r.scores}) == 1:  # one env: task ids say it all
        for c in comparisons:
            for t in c.tasks:
                t.task = t.task.split("/", 1)[1]
            c.only_baseline = [k.split("/", 1)[1] for k in c.only_baseline]
            c.only_candidate = [k.split("/", 1)[1] for k in c.only_candidate]
    for c, p in zip(comparisons, holm([c.p_value for c in comparisons]), strict=True):
        c.p_holm = p
    if all(not c.tasks for c in comparisons):
        raise ReportError(f"no task was scored in both {runs[0].path} and the other runs",
                          hint="compare runs of the same tasks (same --env/--input) that have scored rollouts")
    return comparisons
