"""Metrics over a run's rollouts: pass@k, pass^k, majority@k, clustered bootstrap intervals, summaries."""

from __future__ import annotations

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
from palaestra.metrics.summary import compute_metrics, format_table

__all__ = [
    "cluster_bootstrap_ci",
    "compute_metrics",
    "format_table",
    "ks_for",
    "majority_at_k",
    "majority_vote",
    "mean_reward_ci",
    "pass_at_1_ci",
    "pass_at_k",
    "pass_hat_k",
]
