"""A full session store is back-pressure, never a failed rollout (issue 23).

The cap of an environment's session store follows the run: a flag or run-file field sets it, the generic
default is raised to the run's concurrency, and a cap an environment chose stays. When the cap is below
the concurrency the collector queues rollouts for a free session; a store shared with other clients
(the collector cannot know how full it is) answers ``session_limit`` and the runner waits for a session.
Either way every rollout scores at its first attempt and the journal holds no retries."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from palaestra.agents.tool_agent import ToolAgent
from palaestra.client.env_client import EnvClient
from palaestra.core.environment import Environment
from palaestra.core.errors import EnvironmentFailure
from palaestra.core.records import Task
from palaestra.envs.registry import load_env, load_env_class
from palaestra.models.scripted import ScriptedBackend
from palaestra.orchestrator import run_eval
from palaestra.placement import mount_env
from palaestra.rollout.collector import session_cap
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal_read import read_journal
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy
from palaestra.wire.env import SessionHandle

FAULTY = f"{Path(__file__).parents[1] / 'client' / 'faulty_env.py'}:FaultyEnv"  # declares max_sessions = 2
pytestmark = pytest.mark.timeout(300)


def _faulty_rows(path: Path, n: int) -> None:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"f{i}", "env": FAULTY, "input": f"reach {i + 1}",
                                 "metadata": {"target": i + 1}}) + "\n")


def _mcqa_rows(path: Path, n: int) -> None:
    base = load_env("mcqa").examples()
    with path.open("w") as fh:
        for i in range(n):
            t = base[i % len(base)]
            fh.write(t.model_copy(update={"id": f"{t.id}-{i}"}).model_dump_json() + "\n")


def _max_overlap(records: list[dict[str, Any]]) -> int:
    """The most rollouts whose [start, end] intervals overlap at one instant: an upper bound on the
    sessions held at once, since a session lives inside its rollout."""
    edges = sorted([(r["started_at"], 1) for r in records]
                   + [(r["started_at"] + r["timings"]["total_s"], -1) for r in records], key=lambda e: (e[0], e[1]))
    peak = live = 0
    for _, step in edges:
        live += step
        peak = max(peak, live)
    return peak


def _assert_all_first_attempt(run_dir: Path, n: int) -> list[dict[str, Any]]:
    records, problems = read_journal(run_dir / "rollouts.jsonl")
    assert not problems
    statuses = [(r["outcome"]["status"], r["outcome"].get("message")) for r in records]
    assert all(s == "scored" for s, _ in statuses), statuses
    assert len(records) == n  # one record per slot: nothing was retried
    assert {r["attempt"] for r in records} == {0}
    assert sorted(r["task_id"] for r in records) == sorted({r["task_id"] for r in records})
    return records


def test_session_cap_follows_concurrency_flag_and_environment() -> None:
    mcqa, faulty = load_env_class("mcqa"), load_env_class(FAULTY)
    assert mcqa.max_sessions == Environment.max_sessions == 10_000
    assert session_cap(RunConfig(concurrency=65_000), mcqa) == 65_000  # the generic default follows the run
    assert session_cap(RunConfig(concurrency=64), mcqa) == 10_000
    assert session_cap(RunConfig(concurrency=65_000, max_sessions=300), mcqa) == 300  # the flag decides
    assert session_cap(RunConfig(concurrency=8), faulty) == 2  # a cap the environment chose stays
    assert session_cap(RunConfig(concurrency=8, max_sessions=5), faulty) == 5


def test_environment_cap_below_concurrency_queues_rollouts(tmp_path: Path) -> None:
    """Cap 2 (the environment's own), concurrency 8: every rollout scores at its first attempt, and no
    more than two rollouts ever ran at once."""
    rows = tmp_path / "rows.jsonl"
    _faulty_rows(rows, 16)
    cfg = RunConfig(input=str(rows), model="scripted:oracle?latency_ms=30", concurrency=8, agent="tool",
                    out=str(tmp_path / "run"), placement="direct")
    result = asyncio.run(run_eval(cfg))
    assert result.exit_code == 0
    assert result.metrics["overall"]["n_rollouts_scored"] == 16 and result.metrics["overall"]["mean_reward"] == 1.0
    records = _assert_all_first_attempt(tmp_path / "run", 16)
    assert _max_overlap(records) <= 2


def test_max_sessions_flag_on_a_server_process(tmp_path: Path) -> None:
    """``eval run --max-sessions 2 -c 8`` with the environment in its own server process: the command
    exits 0 and the journal holds one scored first attempt per rollout."""
    rows = tmp_path / "rows.jsonl"
    _mcqa_rows(rows, 12)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--input", str(rows), "-q",
                           "--agent", "single", "--model", "scripted:oracle?latency_ms=20", "-c", "8",
                           "--max-sessions", "2", "--placement", "local", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out / "run.json").read_text())["config"]["max_sessions"] == 2
    assert _max_overlap(_assert_all_first_attempt(out, 12)) <= 2


class _Watched(EnvClient):
    """The same client, counting the opens a full store refused (observation only: every call goes through)."""

    refused = 0

    async def open(self, task: Task) -> SessionHandle:
        try:
            return await super().open(task)
        except EnvironmentFailure as exc:
            if exc.cause == "session_limit":
                self.refused += 1
            raise


async def _shared_store_case() -> None:
    mounted = await mount_env("mcqa", "local", max_sessions=2)  # a real server process, capped at 2
    try:
        env = _Watched(mounted.client.transport, name="mcqa")
        task = load_env("mcqa").examples()[0]
        others = [await env.open(task), await env.open(task)]  # another client fills the store
        with pytest.raises(EnvironmentFailure) as full:
            await env.open(task)
        assert full.value.cause == "session_limit"  # the server's 429, typed as back-pressure
        env.refused = 0
        rollout = asyncio.ensure_future(run_rollout(task, env=env, agent=ToolAgent(),
                                                    proxy=ModelProxy(ScriptedBackend("oracle")),
                                                    model_name="scripted:oracle", deadline_s=120,
                                                    with_reference=True))
        for _ in range(2000):  # until the rollout has been refused twice (a generous bound, not a timing)
            if env.refused >= 2 or rollout.done():
                break
            await asyncio.sleep(0.01)
        assert not rollout.done() and env.refused >= 2  # it waits while the store is full
        await env.close(others[0].session_id)  # a session frees up
        done = await asyncio.wait_for(rollout, 60)
        assert done.outcome.status == "scored", done.outcome
        assert done.reward == 1.0 and done.attempt == 0
        await env.close(others[1].session_id)
    finally:
        await mounted.stop()


def test_shared_full_store_makes_the_rollout_wait() -> None:
    asyncio.run(_shared_store_case())
