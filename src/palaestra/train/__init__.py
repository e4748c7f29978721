"""Training integration: token-faithful sequences, ``sft``/``dpo``/``rl`` exports, GRPO advantages and
the rollout service for trainers.

Importing this package stays cheap (no torch): ``grpo`` and ``local_policy`` import torch and are imported
by name when needed.
"""

from __future__ import annotations

from palaestra.train.advantages import NORMALISATIONS, group_advantages
from palaestra.train.export import ExportOptions, export_run, load_rollouts, make_rows, write_rows
from palaestra.train.rows import ExportStats, dpo_rows, rl_rows, sft_rows
from palaestra.train.sequence import SequenceResult, TokenSample, build_samples, token_drift_rate

__all__ = [
    "NORMALISATIONS", "ExportOptions", "ExportStats", "SequenceResult", "TokenSample", "build_samples",
    "dpo_rows", "export_run", "group_advantages", "load_rollouts", "make_rows", "rl_rows", "sft_rows",
    "token_drift_rate", "write_rows",
]
