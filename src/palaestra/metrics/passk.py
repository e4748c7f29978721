"""Sampling metrics (pass@k, pass^k, majority@k) and clustered bootstrap intervals.

Plain Python but for the bootstrap, which draws its resamples with numpy (1,000 resamples of thousands of
tasks) and imports it only when it has more than one task to resample: numpy's import (~0.1 s) is a
sixth of a small run's start-up.

Conventions used throughout Palaestra:

* ``pass@k`` is the unbiased estimator of "at least one of k samples passes" given ``n`` samples with
  ``c`` passes: ``1 - C(n-c, k) / C(n, k)``.
* ``pass^k`` ("pass-hat-k") is the probability that k samples drawn without replacement *all* pass:
  ``C(c, k) / C(n, k)``. It measures reliability, where pass@k measures coverage.
* ``majority@k`` takes the first k samples (in repeat order), votes over their extracted answers and asks
  whether the winning answer is correct. Samples with no answer do not vote; if none of the k has an
  answer the task counts as a miss. Ties go to the answer that occurred first, so the result is
  deterministic. The winner's correctness is that of its first occurrence.
* ``ks_for(K)`` is ``1, 2, 4, ... <= K`` plus ``K`` itself when it is not a power of two: the doubling
  ladder is what papers report, and K is the most the data can support.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from palaestra.metrics.blas import single_threaded_blas

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "cluster_bootstrap_ci",
    "ks_for",
    "majority_at_k",
    "majority_vote",
    "mean_reward_ci",
    "pass_at_1_ci",
    "pass_at_k",
    "pass_hat_k",
]


def _check(n: int, c: int, k: int) -> None:
    if n < 1:
        raise ValueError(f"pass@k needs at least one sample (n={n}); drop tasks with no scored rollouts")
    if not 0 <= c <= n:
        raise ValueError(f"number correct c={c} must be between 0 and n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"k={k} must be between 1 and the number of samples n={n}; use ks_for(n)")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k. Computed as a product of ratios so that large n never overflows or cancels."""
    _check(n, c, k)
    if k == 1:  # the product below telescopes to (n - c) / n: pass@1 is c / n, exactly (as pass^1 is)
        return c / n
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k = C(c, k) / C(n, k): all k samples drawn without replacement pass."""
    _check(n, c, k)
    if c < k:
        return 0.0
    p = 1.0
    for i in range(k):
        p *= (c - i) / (n - i)
    return p


def ks_for(k_max: int) -> list[int]:
    """The k values to report for tasks with ``k_max`` samples each: 1, 2, 4, ... <= k_max, and k_max."""
    if k_max < 1:
        return []
    ks: list[int] = []
    k = 1
    while k <= k_max:
        ks.append(k)
        k *= 2
    if ks[-1] != k_max:
        ks.append(k_max)
    return ks


def majority_vote(answers: Sequence[Hashable | None]) -> int | None:
    """Index of the first occurrence of the most frequent non-None answer (None if nobody answered).

    Returning an index rather than the answer lets the caller look up that sample's verdict.
    """
    counts: dict[Hashable, int] = {}
    first: dict[Hashable, int] = {}
    for i, a in enumerate(answers):
        if a is None:
            continue
        counts[a] = counts.get(a, 0) + 1
        first.setdefault(a, i)
    if not counts:
        return None
    # max() keeps the first maximal key in insertion order, i.e. the earliest-seen answer wins a tie.
    best = max(counts, key=lambda a: counts[a])
    return first[best]


def majority_at_k(answers: Sequence[Hashable | None], passed: Sequence[bool], k: int) -> float:
    """1.0 if the majority answer among the first k samples is correct, else 0.0.

    ``passed[i]`` says whether sample i's answer was judged correct; callers that know the gold answer
    can pass ``[a == gold for a in answers]``.
    """
    if len(answers) != len(passed):
        raise ValueError(f"answers ({len(answers)}) and passed ({len(passed)}) must have the same length")
    _check(len(answers), 0, k)
    if k == 1:  # the vote of one sample is its own answer, if it gave one
        return 1.0 if answers[0] is not None and passed[0] else 0.0
    winner = majority_vote(answers[:k])
    return 1.0 if winner is not None and passed[winner] else 0.0


def cluster_bootstrap_ci(
    sums: Sequence[float],
    counts: Sequence[float],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile interval of ``sum(sums) / sum(counts)`` resampling clusters (tasks) with replacement.

    Rollouts of one task are correlated (same prompt, same difficulty), so resampling rollouts would
    give intervals that are too narrow; resampling whole tasks does not. Each cluster enters as its
    pre-summed total and count, so a resample costs O(tasks); numpy draws all B resamples at once.
    For a per-task mean (e.g. pass@1 averaged over tasks) pass each task's mean with a count of 1.
    Returns None when there is nothing to resample.

    A resample's statistic depends only on how often it drew each distinct (sum, count) pair, and those
    draw counts are multinomial. With 0/1 rewards there are at most K + 1 distinct pairs however many
    tasks there are, so when the pairs are few (``_FEW_PAIRS``) the draw counts are sampled directly:
    the same distribution, at O(pairs) per resample instead of O(tasks) (2,000 tasks: ~1 ms, not ~20).
    """
    if len(sums) != len(counts):
        raise ValueError(f"sums ({len(sums)}) and counts ({len(counts)}) must have the same length")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    n = len(sums)
    if n == 0 or sum(counts) <= 0:
        return None
    if n == 1:  # every resample draws the one task: the statistic cannot move
        only = float(sums[0]) / float(counts[0])
        return (only, only)
    with single_threaded_blas():
        import numpy as np

    s = np.asarray(sums, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    rng = np.random.default_rng(seed)
    pairs, weights = np.unique(np.column_stack((s, c)), axis=0, return_counts=True)
    if len(pairs) * _FEW_PAIRS <= n:
        stats = _resample_pairs(rng, pairs, weights, n, n_boot)
    else:
        stats = _resample_clusters(rng, s, c, n_boot)
    if stats.size == 0:
        return None
    alpha = 1.0 - confidence
    lo, hi = np.quantile(stats, [alpha / 2, 1.0 - alpha / 2])
    return (float(lo), float(hi))


def mean_reward_ci(
    rewards_per_task: Sequence[Sequence[float]], *, n_boot: int = 1000, seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float] | None:
    """CI of the rollout-weighted mean reward (total reward / scored rollouts), clustered by task."""
    return cluster_bootstrap_ci(
        [float(sum(r)) for r in rewards_per_task],
        [len(r) for r in rewards_per_task],
        n_boot=n_boot,
        seed=seed,
        confidence=confidence,
    )


def pass_at_1_ci(
    n_c_per_task: Sequence[tuple[int, int]], *, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float] | None:
    """CI of pass@1 (the mean over tasks of c/n), clustered by task. Tasks with n=0 are ignored."""
    rates = [c / n for n, c in n_c_per_task if n > 0]
    return cluster_bootstrap_ci(rates, [1] * len(rates), n_boot=n_boot, seed=seed, confidence=confidence)


# The multinomial draw costs ~1 µs per distinct pair and resample, the index draw ~20 ns per task and
# resample: count the pairs' draws directly when there are at most 1/64 as many pairs as tasks.
_FEW_PAIRS = 64


def _resample_pairs(rng: np.random.Generator, pairs: np.ndarray, weights: np.ndarray, n: int,
                    n_boot: int) -> np.ndarray:
    """Bootstrap statistics from draw counts: each resample draws ``n`` clusters, ``weights[j]`` of which
    hold the pair ``pairs[j]`` (a sum and a count), so its counts per pair are Multinomial(n, weights / n)."""
    drawn = rng.multinomial(n, weights / n, size=n_boot)
    total = (drawn * pairs[:, 1]).sum(axis=1)
    ok = total > 0  # a draw of only zero-count clusters is degenerate: skip it
    result: np.ndarray = (drawn[ok] * pairs[:, 0]).sum(axis=1) / total[ok]
    return result


def _resample_clusters(rng: np.random.Generator, s: np.ndarray, c: np.ndarray, n_boot: int) -> np.ndarray:
    """Bootstrap statistics from drawn cluster indices: ``n_boot`` resamples of the ``len(s)`` clusters."""
    import numpy as np

    n = len(s)
    parts: list[np.ndarray] = []
    rows = max(1, 1_000_000 // n)  # resample in blocks: memory stays ~16 MB however many tasks
    same_count = bool(np.all(c == c[0]))  # the usual case (K repeats each): every draw's total is n*c0
    for start in range(0, n_boot, rows):
        idx = rng.integers(0, n, size=(min(rows, n_boot - start), n), dtype=np.int32 if n < 2**31 else np.int64)
        drawn = s[idx].sum(axis=1)
        if same_count:
            if c[0] > 0:
                parts.append(drawn / (n * c[0]))
            continue
        total = c[idx].sum(axis=1)
        ok = total > 0  # a draw of only zero-count clusters is degenerate: skip it
        parts.append(drawn[ok] / total[ok])
    return np.concatenate(parts) if parts else np.empty(0)
