"""``palaestra eval compare``: is run B better than run A on the same tasks, and by how much?

Two runs on the same tasks are paired data: task difficulty varies far more than the effect of a change,
so comparing two unpaired means throws most of the signal away. Each task present (and scored) in both
runs gives one difference ``d_t = score_B(t) - score_A(t)`` (score: mean reward or pass rate over that
task's counted rollouts); the estimate is the mean of ``d``, its 95% interval a paired bootstrap over
tasks, and its p-value a sign-flip permutation test (under "no difference" each ``d_t`` is as likely to
be negated; exact up to 16 tasks, Monte Carlo beyond). With more than one candidate, Holm's correction
controls the family-wise error. Tasks missing from either run are listed, never imputed.

Next to the paired scores, each run's spend (``RunSpend``): accuracy, model calls, tokens and cost per
answering model. A routing strategy is only worth it if it buys accuracy for less than the expensive model
alone, and that trade-off needs both numbers side by side.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaestra.metrics.blas import single_threaded_blas
from palaestra.metrics.summary import compute_metrics
from palaestra.metrics.usage import as_count, model_usage
from palaestra.report.index import JournalIndex
from palaestra.report.rundata import ReportError, load_run_info, stored_metrics

with single_threaded_blas():
    import numpy as np

__all__ = ["Comparison", "ModelSpend", "RunScores", "RunSpend", "TaskDiff", "compare_runs", "holm",
           "paired_bootstrap_ci", "run_names", "run_scores", "run_spend", "runs_spend", "sign_flip_p"]

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


def run_names(run_dirs: Sequence[str | Path]) -> list[str]:
    """How runs are called in a comparison: the directory name, or the path when two names collide."""
    names = [Path(d).resolve().name for d in run_dirs]
    return [str(Path(d)) for d in run_dirs] if len(set(names)) < len(names) else names


@dataclass
class ModelSpend:
    """What one answering model (a routed call counts for the model that answered it) cost a run."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None  # None: no price for this model in the run's model_prices

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class RunSpend:
    """One run's accuracy next to what it spent, so strategies (cheap, strong, a cascade) can be weighed."""

    name: str
    path: Path
    strategy: str  # the run's --model (e.g. ``router:cascade?to=cheap,strong``), else the directory name
    mean_reward: float | None
    pass_rate: float | None  # pass@1
    coverage: float | None
    n_rollouts_scored: int
    models: dict[str, ModelSpend]
    source: str  # "metrics.json", or "journal" when the metrics were missing or older than the journal

    @property
    def calls(self) -> int:
        return sum(m.calls for m in self.models.values())

    @property
    def prompt_tokens(self) -> int:
        return sum(m.prompt_tokens for m in self.models.values())

    @property
    def completion_tokens(self) -> int:
        return sum(m.completion_tokens for m in self.models.values())

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def unpriced(self) -> list[str]:
        """Models that answered calls but have no price: while any is left, the total cost is unknown."""
        return [name for name, m in self.models.items() if m.calls and m.cost is None]

    @property
    def cost(self) -> float | None:
        """Total cost, or None when nothing was priced or some answering model was not (a partial sum
        would understate what the run spent)."""
        if not self.models or self.unpriced:
            return None
        costs = [m.cost for m in self.models.values() if m.cost is not None]
        return float(sum(costs)) if costs else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "strategy": self.strategy,
                "mean_reward": self.mean_reward, "pass_rate": self.pass_rate, "coverage": self.coverage,
                "n_rollouts_scored": self.n_rollouts_scored, "calls": self.calls,
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "tokens": self.tokens, "cost": self.cost, "unpriced": self.unpriced, "source": self.source,
                "models": {name: {"calls": m.calls, "prompt_tokens": m.prompt_tokens,
                                  "completion_tokens": m.completion_tokens, "tokens": m.tokens, "cost": m.cost}
                           for name, m in self.models.items()}}


def _float(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    return float(value) if ok else None


def _model_spend(usage: Any) -> dict[str, ModelSpend]:
    """``model_usage`` (from metrics.json or recomputed) as ModelSpend, leniently: a hand-edited or
    older metrics file must not break a comparison."""
    out: dict[str, ModelSpend] = {}
    for name, row in (usage.items() if isinstance(usage, dict) else []):
        if isinstance(row, dict):
            out[str(name)] = ModelSpend(as_count(row.get("calls")), as_count(row.get("prompt_tokens")),
                                        as_count(row.get("completion_tokens")), _float(row.get("cost")))
    return dict(sorted(out.items()))


def _strategy(config: dict[str, Any], path: Path) -> str:
    """What the run asked for: its --model, or for a multi-entry run the entries (its --model then is
    only a default, and naming it would misdescribe the run)."""
    entries = config.get("entries")
    if isinstance(entries, list) and entries:
        names = [str(e.get("name")) for e in entries if isinstance(e, dict)]
        return f"entries: {', '.join(names)}"
    model = config.get("model")
    return str(model) if model else path.resolve().name


def run_spend(run_dir: str | Path, name: str | None = None) -> RunSpend:
    """Accuracy, calls, tokens and cost of a run: from ``metrics.json`` when it is up to date, else
    recomputed from the journal (a run still going, or killed before writing metrics), priced with the
    ``model_prices`` recorded in its ``run.json`` — the same numbers the run itself would report."""
    info = load_run_info(run_dir)
    config = info.manifest.get("config")
    config = config if isinstance(config, dict) else {}
    metrics = stored_metrics(info)
    usage = metrics.get("model_usage") if metrics is not None else None
    source = "metrics.json"
    if metrics is None or not isinstance(usage, dict):  # older metrics files have no model_usage
        source = "journal"
        index = JournalIndex(info.journal)
        index.advance()
        if metrics is None:
            metrics = compute_metrics(index.rows, info.expected)
        raw_prices = config.get("model_prices")
        prices = {str(k): float(v) for k, v in raw_prices.items() if _float(v) is not None} \
            if isinstance(raw_prices, dict) else {}
        # records stream through one open file: a long journal is never held in memory whole
        records = index.read_records(range(len(index.rows)), expand=False)  # usage needs no messages
        usage = model_usage((rec for _, rec in records if rec is not None), prices)
    overall = metrics.get("overall")
    overall = overall if isinstance(overall, dict) else {}
    pass_at_k = overall.get("pass_at_k")
    path = Path(run_dir)
    return RunSpend(name or path.resolve().name, path, _strategy(config, path),
                    _float(overall.get("mean_reward")),
                    _float(pass_at_k.get("1")) if isinstance(pass_at_k, dict) else None,
                    _float(overall.get("coverage")), as_count(overall.get("n_rollouts_scored")),
                    _model_spend(usage), source)


def runs_spend(run_dirs: Sequence[str | Path]) -> list[RunSpend]:
    """``run_spend`` of each run, named as ``compare_runs`` names them."""
    return [run_spend(d, n) for d, n in zip(run_dirs, run_names(run_dirs), strict=True)]


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
    for r, name in zip(runs, run_names(run_dirs), strict=True):  # a name shared by two runs: their paths
        r.name = name
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
