"""``eval run --cluster``: a run spread over a real two-node Ray cluster gives the metrics of a local run,
and losing an environment replica or a whole worker node mid-run loses no rollout."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from palaestra.core.records import Rollout
from palaestra.envs.registry import load_env
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal_read import read_journal

pytestmark = pytest.mark.timeout(240)

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _counter_rows(path: Path, n: int) -> Path:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"c{i}", "env": "counter", "input": f"bring the counter to {i + 2}",
                                 "metadata": {"start": 0, "target": i + 2}}) + "\n")
    return path


def _records(run: Path) -> list[dict[str, Any]]:
    records, problems = read_journal(run / "rollouts.jsonl")
    assert not problems
    return records


def _assert_nothing_lost(run: Path, slots: set[tuple[str, int]]) -> list[dict[str, Any]]:
    records = _records(run)
    scored = Counter((r["task_id"], r["repeat"]) for r in records if r["outcome"]["status"] == "scored")
    assert set(scored) == slots, "a (task, repeat) was never scored"
    assert max(scored.values()) == 1, "a (task, repeat) was scored twice"
    return records


async def test_run_spread_over_two_nodes_matches_a_local_run(ray_cluster: Any, tmp_path: Path) -> None:
    rows = _counter_rows(tmp_path / "tasks.jsonl", 10)
    base = {"input": str(rows), "env": f"{FIXTURES / 'counter_env.py'}:CounterEnv", "repeats": 2,
            "model": "scripted:oracle?accuracy=0.6", "concurrency": 8, "seed": 0}  # one seed: the same draws
    local = await run_eval(RunConfig(**base, out=str(tmp_path / "local")))
    spread = await run_eval(RunConfig(**base, out=str(tmp_path / "ray"), placement="ray",
                                      cluster=f"ray:{ray_cluster.address}?workers=2&env_replicas=2"))
    assert 0 < local.metrics["overall"]["mean_reward"] < 1, "the policy should fail some tasks, to compare"
    assert spread.metrics["overall"] == local.metrics["overall"]
    assert spread.metrics["overall"]["n_failed"] == {}, "a stateful session lost its replica (not sticky)"
    placed = json.loads((tmp_path / "ray" / "cluster.json").read_text())
    assert placed["nodes"] == 2 and placed["workers"] == 2, placed
    assert placed["replicas"] == {"counter": 2} and placed["replica_nodes"] == 2
    by_slot = {(r["task_id"], r["repeat"]): r["verdict"]["reward"] for r in _records(tmp_path / "local")}
    assert {(r["task_id"], r["repeat"]): r["verdict"]["reward"] for r in _records(tmp_path / "ray")} == by_slot


async def test_killing_an_environment_replica_mid_run_fails_only_its_rollouts(ray_cluster: Any,
                                                                             tmp_path: Path) -> None:
    killed: list[int] = []

    def kill() -> None:
        import ray  # this process is the driver: ask the run's own replica for its process id

        name = next(n for n in ray.util.list_named_actors() if "-mcqa-" in n)
        info = ray.get(ray.get_actor(name).ping.remote(), timeout=30)
        os.kill(info["pid"], signal.SIGKILL)
        killed.append(info["sessions"])

    def kill_a_replica(rollout: Rollout, final: bool) -> None:
        if not killed and rollout.outcome.status == "scored":
            killed.append(0)  # mid-wave: the next rollouts' sessions are open, waiting on the model
            asyncio.get_running_loop().call_later(0.15, kill)

    cfg = RunConfig(env="mcqa", limit=12, repeats=2, model="scripted:oracle?latency_ms=400", concurrency=8,
                    placement="ray", out=str(tmp_path / "run"),
                    cluster=f"ray:{ray_cluster.address}?workers=2&env_replicas=2")
    result = await run_eval(cfg, on_rollout=kill_a_replica)
    assert len(killed) == 2 and killed[1] > 0, "the replica was not killed while it held sessions"
    ids = [t.id for t in load_env("mcqa").examples()[:12]]
    records = _assert_nothing_lost(tmp_path / "run", {(i, r) for i in ids for r in range(2)})
    failed = [r for r in records if r["outcome"]["status"] == "failed"]
    assert failed and {r["outcome"]["kind"] for r in failed} == {"environment"}
    assert all("replica" in r["outcome"]["message"] for r in failed)
    assert result.metrics["overall"]["coverage"] == 1.0 and result.metrics["overall"]["mean_reward"] == 1.0
    assert len(failed) <= 8, "more rollouts failed than were in flight"


async def test_killing_the_worker_node_mid_run_loses_nothing(ray_cluster: Any, tmp_path: Path) -> None:
    killed: list[int] = []

    def kill() -> None:
        node = ray_cluster.worker  # the whole node at once: its raylet, rollout worker and replica processes
        pids = [p for p in node.pids() if p != node.process.pid and any(
            k in node.cmdline(p) for k in ("raylet/raylet", "ray::RolloutWorker", "ray::EnvReplica"))]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        killed.append(len(pids))

    def kill_worker_node(rollout: Rollout, final: bool) -> None:
        if not killed and rollout.outcome.status == "scored":
            killed.append(1)  # mid-wave, with the next rollouts in flight
            asyncio.get_running_loop().call_later(0.15, kill)

    rows = _counter_rows(tmp_path / "tasks.jsonl", 12)
    cfg = RunConfig(input=str(rows), env=f"{FIXTURES / 'counter_env.py'}:CounterEnv", repeats=2,
                    model="scripted:oracle?latency_ms=300", concurrency=8, placement="ray",
                    out=str(tmp_path / "run"), cluster=f"ray:{ray_cluster.address}?workers=2&env_replicas=2")
    result = await run_eval(cfg, on_rollout=kill_worker_node)
    assert len(killed) == 2 and killed[1] >= 2, "the worker node's raylet and rollout worker were not found"
    records = _assert_nothing_lost(tmp_path / "run", {(f"c{i}", r) for i in range(12) for r in range(2)})
    failed = [r for r in records if r["outcome"]["status"] == "failed"]
    assert failed, "the node was killed with rollouts in flight, so some attempts must have failed"
    assert {r["outcome"]["kind"] for r in failed} <= {"agent", "environment"}
    assert any("lost mid-rollout" in r["outcome"]["message"] for r in failed)
    assert result.metrics["overall"]["coverage"] == 1.0 and result.metrics["overall"]["mean_reward"] == 1.0
