"""Faults during a run: an environment server killed mid-run is restarted; its rollouts fail as
`environment` and are retried; nothing is lost or scored as 0."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from palaestra.orchestrator import write_metrics
from palaestra.rollout.collector import Collector, plan
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal_read import read_journal
from palaestra.rollout.selection import select_tasks

COUNTER = str(Path(__file__).parents[1] / "fixtures" / "counter_env.py") + ":CounterEnv"


async def test_env_server_killed_mid_run_is_restarted_and_rollouts_retried(tmp_path: Path) -> None:
    cfg = RunConfig(env=COUNTER, model="scripted:oracle?latency_ms=30", placement="local", repeats=6,
                    concurrency=8, max_attempts=5, out=str(tmp_path))
    tasks, _ = select_tasks(cfg)
    pending, _ = plan(tasks, cfg.repeats, [], cfg.max_attempts)
    collector = Collector(cfg, tmp_path, tasks)
    run = asyncio.create_task(collector.collect(pending))
    while not collector.envs:
        await asyncio.sleep(0.01)
    supervisor = collector.envs["counter"].supervisor
    assert supervisor is not None and supervisor.process is not None
    await asyncio.sleep(0.4)
    first_pid = supervisor.process.pid
    os.kill(first_pid, signal.SIGKILL)
    await run
    assert supervisor.restarts >= 1
    records, _ = read_journal(tmp_path / "rollouts.jsonl")
    failed = [r for r in records if r["outcome"]["status"] != "scored"]
    assert failed and all(r["outcome"]["kind"] == "environment" and r["verdict"] is None for r in failed)
    metrics = write_metrics(tmp_path, tasks, cfg.repeats)
    assert metrics["overall"]["coverage"] == 1.0 and metrics["overall"]["mean_reward"] == 1.0
    scored = [(r["task_id"], r["repeat"]) for r in records if r["outcome"]["status"] == "scored"]
    assert len(scored) == len(set(scored)) == len(tasks) * 6
    assert metrics["overall"]["n_failed"] == {}  # every failed attempt was retried to a score
    try:
        os.kill(first_pid, 0)
        raise AssertionError("the killed server is still there")
    except ProcessLookupError:
        pass
