from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from palaestra.metrics.passk import (
    cluster_bootstrap_ci,
    ks_for,
    majority_at_k,
    majority_vote,
    mean_reward_ci,
    pass_at_1_ci,
    pass_at_k,
    pass_hat_k,
)


def test_pass_at_k_matches_binomial_definition() -> None:
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
                assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12), (n, c, k)


def test_pass_hat_k_matches_binomial_definition() -> None:
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = Fraction(math.comb(c, k), math.comb(n, k))
                assert pass_hat_k(n, c, k) == pytest.approx(float(exact), abs=1e-12), (n, c, k)


def test_k_equal_one_is_the_pass_rate_and_large_n_is_stable() -> None:
    assert pass_at_k(7, 3, 1) == pytest.approx(3 / 7)
    assert pass_hat_k(7, 3, 1) == pytest.approx(3 / 7)
    # math.comb(5000, 100) is ~1e211: a naive float ratio would overflow; the product form must not.
    exact = 1 - Fraction(math.comb(4990, 100), math.comb(5000, 100))
    assert pass_at_k(5000, 10, 100) == pytest.approx(float(exact), rel=1e-9)
    assert pass_at_k(5000, 0, 100) == 0.0
    assert pass_at_k(5000, 4950, 100) == 1.0
    assert pass_hat_k(5000, 5000, 100) == 1.0


@pytest.mark.parametrize("n,c,k", [(0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_invalid_arguments_are_rejected_with_a_reason(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match=r"n=|c=|k="):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError):
        pass_hat_k(n, c, k)


def test_ks_for_is_powers_of_two_plus_the_maximum() -> None:
    assert ks_for(0) == []
    assert ks_for(1) == [1]
    assert ks_for(2) == [1, 2]
    assert ks_for(5) == [1, 2, 4, 5]
    assert ks_for(8) == [1, 2, 4, 8]
    assert ks_for(20) == [1, 2, 4, 8, 16, 20]


def test_majority_vote_breaks_ties_by_first_occurrence_and_ignores_missing_answers() -> None:
    assert majority_vote(["b", "a", "a", "b"]) == 0
    assert majority_vote(["a", "b", "b"]) == 1
    assert majority_vote([None, "x", None, None]) == 1
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None


def test_majority_at_k_uses_the_first_k_samples() -> None:
    answers = ["a", "b", "b", "a", None]
    passed = [True, False, False, True, False]
    assert majority_at_k(answers, passed, 1) == 1.0  # "a" alone
    assert majority_at_k(answers, passed, 3) == 0.0  # "b" wins 2-1
    assert majority_at_k(answers, passed, 4) == 1.0  # 2-2 tie, "a" came first
    assert majority_at_k([None, None], [True, True], 2) == 0.0  # nobody answered: a miss
    with pytest.raises(ValueError, match="same length"):
        majority_at_k(["a"], [True, False], 1)


def test_cluster_bootstrap_is_deterministic_and_brackets_the_estimate() -> None:
    rng = random.Random(7)
    sums = [rng.random() * 4 for _ in range(200)]
    counts = [4] * 200
    a = cluster_bootstrap_ci(sums, counts, seed=3)
    b = cluster_bootstrap_ci(sums, counts, seed=3)
    c = cluster_bootstrap_ci(sums, counts, seed=4)
    assert a == b and a != c
    assert a is not None
    point = sum(sums) / sum(counts)
    assert a[0] < point < a[1]
    assert cluster_bootstrap_ci([], []) is None
    assert cluster_bootstrap_ci([2.0, 2.0], [4, 4]) == (0.5, 0.5)


def test_resampling_tasks_reflects_within_task_correlation() -> None:
    # 20 tasks, each either always solved or never solved, 10 rollouts each: the effective sample size is
    # 20, not 200, so the 95% interval must be about +/-0.22 wide, not the +/-0.07 of i.i.d. rollouts.
    sums = [10.0] * 10 + [0.0] * 10
    lo, hi = cluster_bootstrap_ci(sums, [10] * 20, n_boot=2000, seed=1) or (0.0, 0.0)
    assert 0.3 < hi - lo < 0.6
    assert lo < 0.5 < hi


def test_ratio_weighting_uses_counts() -> None:
    ci = cluster_bootstrap_ci([10.0, 0.0], [10, 1], n_boot=500, seed=0)
    assert ci is not None
    # every resample is 10/11 (both), 1.0 (first twice) or 0.0 (second twice)
    assert 0.0 <= ci[0] <= 10 / 11 <= ci[1] <= 1.0


def test_convenience_intervals() -> None:
    ci = mean_reward_ci([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]], seed=0)
    assert ci is not None and 0.0 <= ci[0] <= 0.5 <= ci[1] <= 1.0
    p1 = pass_at_1_ci([(4, 4), (2, 0), (0, 0)], seed=0)  # the n=0 task is ignored
    assert p1 is not None and p1[0] == 0.0 and p1[1] == 1.0
    assert pass_at_1_ci([]) is None


def test_bootstrap_on_thousands_of_tasks_finishes() -> None:
    rng = random.Random(0)
    sums = [float(rng.randint(0, 8)) for _ in range(3000)]
    ci = cluster_bootstrap_ci(sums, [8] * 3000)
    assert ci is not None and ci[1] - ci[0] < 0.05


def test_resampling_draw_counts_per_distinct_pair_has_the_bootstrap_distribution() -> None:
    # Four clusters, two of them equal: the exact bootstrap distribution of sum/count enumerates the 4**4
    # equally likely resamples; drawing counts per distinct pair must reproduce it (fixed seed, 100k draws).
    import itertools

    import numpy as np

    from palaestra.metrics.passk import _resample_pairs

    sums, counts = [2.0, 2.0, 0.0, 3.0], [2.0, 2.0, 1.0, 3.0]
    exact: dict[float, float] = {}
    for draw in itertools.product(range(4), repeat=4):
        stat = round(sum(sums[i] for i in draw) / sum(counts[i] for i in draw), 9)
        exact[stat] = exact.get(stat, 0.0) + 1 / 4**4
    pairs, weights = np.unique(np.column_stack((sums, counts)), axis=0, return_counts=True)
    assert len(pairs) == 3
    stats = _resample_pairs(np.random.default_rng(0), pairs, weights, 4, 100_000)
    values, seen = np.unique(np.round(stats, 9), return_counts=True)
    assert set(values.tolist()) <= set(exact)
    for value, times in zip(values.tolist(), seen.tolist()):
        assert abs(times / 100_000 - exact[value]) < 0.005, value


def test_the_interval_is_the_same_whichever_way_the_resamples_are_drawn() -> None:
    # 0/1 rewards over 2,000 tasks (3 distinct pairs: the draw-count path) against the cluster-index path on
    # the same data: with 20,000 resamples each, the two percentile intervals agree to well under their width.
    import numpy as np

    from palaestra.metrics.passk import _FEW_PAIRS, _resample_clusters

    rng = random.Random(5)
    sums = [float(rng.choice([0, 1, 1, 2])) for _ in range(2000)]
    counts = [2.0] * 2000
    assert 3 * _FEW_PAIRS <= 2000  # so cluster_bootstrap_ci takes the draw-count path here
    fast = cluster_bootstrap_ci(sums, counts, n_boot=20_000, seed=1)
    slow = np.quantile(_resample_clusters(np.random.default_rng(1), np.asarray(sums), np.asarray(counts), 20_000),
                       [0.025, 0.975])
    assert fast is not None
    width = fast[1] - fast[0]
    assert 0.02 < width < 0.05
    assert abs(fast[0] - slow[0]) < 0.1 * width and abs(fast[1] - slow[1]) < 0.1 * width
