"""A real two-node Ray cluster on 127.0.0.1 for the cluster tests: a head and a worker node started as
separate processes (as two machines would be), shared by a test module because Ray is slow to start."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from palaestra.cluster.localnode import RayNode, auth_env, start_head, start_worker

# The GCS notices a lost node within ~2 s instead of ~30 s, so the fault tests stay short.
FAST_HEALTH = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
               "RAY_health_check_failure_threshold": "3", "RAY_health_check_initial_delay_ms": "500"}


@dataclass
class LocalCluster:
    head: RayNode
    worker: RayNode
    address: str


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[LocalCluster]:
    env = {**auth_env(), "RAY_DEDUP_LOGS": "0"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the driver (this process) needs the cluster's token
    try:
        import ray  # after the token is in the environment: Ray reads it on import
    except ImportError:
        pytest.skip("ray: the [ray] extra is not installed")
    tmp = Path(tempfile.mkdtemp(prefix="pal-ray-", dir="/tmp"))  # short: Ray's socket paths have a length cap
    head = start_head(tmp, cpus=2, env={**env, **FAST_HEALTH})
    worker = None
    try:
        worker = start_worker(head.address, tmp, cpus=2, env=env)
        yield LocalCluster(head, worker, head.address)
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        seen: list[int] = []
        for node in (worker, head):
            if node is not None:
                node.stop()
                seen += node.leftovers()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        assert not seen, f"Ray processes left running: {seen}"
