"""GRPO group advantages: each rollout's reward against the other rollouts of the same task.

The baseline is the group itself, so no value model is needed. How the centred reward is scaled is a
real choice with published trade-offs, hence configurable:

- ``group`` (GRPO): ``(r - mean_g) / (std_g + eps)``; a group with equal rewards gets 0 everywhere.
- ``mean`` (Dr. GRPO): ``r - mean_g``; no std division, which otherwise up-weights nearly-solved and
  nearly-hopeless tasks.
- ``batch``: ``(r - mean_g) / (std_batch + eps)``; one scale for the whole batch.
- ``rloo``: ``r - mean of the other members`` (leave-one-out); unbiased baseline.
- ``none``: the raw reward (plain REINFORCE).

Standard deviations are population ones (ddof=0), so a group of two with rewards 0 and 1 gets -1 and 1.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Literal

Normalisation = Literal["group", "mean", "batch", "rloo", "none"]
NORMALISATIONS: tuple[str, ...] = ("group", "mean", "batch", "rloo", "none")


def _std(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def group_advantages(rewards: Sequence[float], groups: Sequence[Hashable], normalisation: Normalisation = "group",
                     eps: float = 1e-6) -> list[float]:
    """One advantage per reward; ``groups[i]`` names the group (task) of reward ``i``."""
    if normalisation not in NORMALISATIONS:
        raise ValueError(f"unknown advantage normalisation {normalisation!r}: use one of "
                         f"{', '.join(NORMALISATIONS)}")
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group keys: give one key per reward")
    if normalisation == "none":
        return [float(r) for r in rewards]
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    out = [0.0] * len(rewards)
    batch_std = _std([float(r) for r in rewards]) if normalisation == "batch" else 0.0
    for idx in members.values():
        values = [float(rewards[i]) for i in idx]
        total, n = sum(values), len(values)
        mean = total / n
        std = _std(values)
        for i, r in zip(idx, values):
            if normalisation == "group":
                out[i] = (r - mean) / (std + eps) if std > 0 else 0.0
            elif normalisation == "mean":
                out[i] = r - mean
            elif normalisation == "batch":
                out[i] = (r - mean) / (batch_std + eps) if batch_std > 0 else 0.0
            else:  # rloo
                out[i] = r - (total - r) / (n - 1) if n > 1 else 0.0
    return out
