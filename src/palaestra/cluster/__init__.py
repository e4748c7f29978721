"""Scale-out runs: worker processes on this machine (``procs``, ``--cluster local``), the Ray collector
(``driver``), its rollout workers and the actors' fleet, and Slurm batch scripts that start a cluster.
The environment replicas themselves are a placement (``placement/ray.py``). Nothing here imports Ray at
module import time, so the single-process path never pays for it and Palaestra works without the
``[ray]`` extra."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from palaestra.cluster.driver import RayCollector
    from palaestra.cluster.procs import ProcessCollector
    from palaestra.core.records import Task
    from palaestra.rollout.collector import ProgressFn
    from palaestra.rollout.config import RunConfig


def cluster_collector(cfg: RunConfig, run_dir: Path, tasks: list[Task], *,
                      on_rollout: ProgressFn | None = None) -> ProcessCollector | RayCollector:
    """The collector ``cfg.cluster`` names: worker processes here (``local``) or worker actors on Ray."""
    from palaestra.cluster.spec import parse_cluster

    if parse_cluster(cfg.cluster or "").backend == "local":
        from palaestra.cluster.procs import ProcessCollector

        return ProcessCollector(cfg, run_dir, tasks, on_rollout=on_rollout)
    from palaestra.cluster.driver import RayCollector

    return RayCollector(cfg, run_dir, tasks, on_rollout=on_rollout)
