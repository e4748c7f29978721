"""``--cluster local?workers=N``: worker processes on this machine, one journal writer.

Every slot is scored exactly once whichever worker ran it; a driver killed with SIGKILL mid-run takes its
workers with it and resume runs exactly the missing slots (same ids, same count, none twice); a worker
killed mid-run is replaced and its in-flight attempts journaled as failed(agent) and run again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from palaestra.cluster.procs import ProcessCollector
from palaestra.core.errors import ConfigError
from palaestra.core.records import Rollout
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig

pytestmark = pytest.mark.timeout(300)
MCQA_ROWS = 25  # the bundled mcqa examples


def _records(run: Path) -> list[dict[str, Any]]:
    with (run / "rollouts.jsonl").open("rb") as fh:
        return [orjson.loads(line) for line in fh if line.endswith(b"\n")]


def _scored_once(records: list[dict[str, Any]], expected: set[tuple[str, int]]) -> None:
    scored = Counter((r["task_id"], r["repeat"]) for r in records if r["outcome"]["status"] == "scored")
    twice = [k for k, n in scored.items() if n > 1]
    assert not twice, f"scored more than once: {twice[:5]}"
    missing, extra = sorted(expected - set(scored)), sorted(set(scored) - expected)
    assert not missing and not extra, f"missing {missing[:5]}, extra {extra[:5]}"
    ids = [r["rollout_id"] for r in records]
    assert len(ids) == len(set(ids)), "a rollout id was journaled twice"


def _expected(repeats: int) -> set[tuple[str, int]]:
    from palaestra.envs.registry import load_env

    return {(t.id, rep) for t in load_env("mcqa").examples()[:MCQA_ROWS] for rep in range(repeats)}


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for a parent that is gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _workers_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"palaestra.cluster.procworker" in cmd:
            out.append(int(entry))
    return out


def _wait(cond: Any, what: str, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def _lines(run: Path) -> int:
    try:
        return (run / "rollouts.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _cli(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--out", str(out), "-q", *extra]


def test_two_workers_score_every_slot_once_and_both_work(tmp_path: Path) -> None:
    seen: list[tuple[str, int, bool]] = []
    cfg = RunConfig(env="mcqa", repeats=4, model="scripted:oracle", concurrency=8, out=str(tmp_path / "run"),
                    cluster="local?workers=2")
    result = asyncio.run(run_eval(cfg, on_rollout=lambda r, final: seen.append((r.task_id, r.repeat, final))))
    overall = result.metrics["overall"]
    assert overall["coverage"] == 1.0 and overall["mean_reward"] == 1.0
    records = _records(tmp_path / "run")
    assert len(records) == MCQA_ROWS * 4
    _scored_once(records, _expected(4))
    cluster = json.loads((tmp_path / "run" / "cluster.json").read_text())
    assert cluster["backend"] == "local" and cluster["workers"] == 2 and cluster["restarts"] == 0
    assert sum(cluster["rollouts_by_worker"]) == 100 and min(cluster["rollouts_by_worker"]) > 0
    pids = [p for ps in cluster["pids"] for p in ps]
    assert len(set(pids)) == 2 and os.getpid() not in pids and not any(_alive(p) for p in pids)
    # the progress callback saw every slot once, as final, with the record's identity
    assert sorted((t, r) for t, r, final in seen if final) == sorted(_expected(4))
    # the journal reads back as full rollouts, like a one-process run's
    from palaestra.rollout.compact import read_expanded

    expanded, problems = read_expanded(tmp_path / "run" / "rollouts.jsonl")
    assert not problems and len([Rollout.model_validate(r) for r in expanded]) == 100


def test_resume_after_sigkill_of_the_driver_runs_exactly_the_missing_slots(tmp_path: Path) -> None:
    out, repeats = tmp_path / "run", 12  # 300 slots at 20 ms a model call: a few seconds of work
    proc = subprocess.Popen(_cli(out, "--env", "mcqa", "-k", str(repeats), "--concurrency", "8", "--model",
                                 "scripted:oracle?latency_ms=20", "--cluster", "local?workers=2"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait(lambda: _lines(out) >= 60 or proc.poll() is not None, "60 journaled rollouts")
        workers = _workers_of(proc.pid)
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read()[-2000:]!r}"
        assert len(workers) == 2, f"expected two worker processes, found {workers}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        # the workers see their input close and stop on their own
        _wait(lambda: not any(_alive(w) for w in workers), "the workers of a killed driver to exit", 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    before = (out / "rollouts.jsonl").read_bytes()
    before = before[: before.rfind(b"\n") + 1]  # a torn last line (never acknowledged) is cut on resume
    first = [orjson.loads(line) for line in before.splitlines()]
    assert 60 <= len(first) < MCQA_ROWS * repeats, "the kill did not land mid-run"
    done = {(r["task_id"], r["repeat"]) for r in first if r["outcome"]["status"] == "scored"}

    resumed = subprocess.run(_cli(out, "--resume", str(out)), capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = (out / "rollouts.jsonl").read_bytes()
    assert after.startswith(before), "resume rewrote records journaled before the kill"
    records = _records(out)
    _scored_once(records, _expected(repeats))
    new = records[len(first):]
    # exactly the slots without a scored record ran again, each once (the oracle scores every attempt)
    assert {(r["task_id"], r["repeat"]) for r in new} == _expected(repeats) - done
    assert len(new) == MCQA_ROWS * repeats - len(done)
    assert all(r["outcome"]["status"] == "scored" for r in new)


def test_a_worker_killed_mid_run_is_replaced_and_its_attempts_run_again(tmp_path: Path) -> None:
    out, repeats = tmp_path / "run", 8
    proc = subprocess.Popen(_cli(out, "--env", "mcqa", "-k", str(repeats), "--concurrency", "8", "--model",
                                 "scripted:oracle?latency_ms=20", "--cluster", "local?workers=2"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait(lambda: _lines(out) >= 30 or proc.poll() is not None, "30 journaled rollouts")
        workers = _workers_of(proc.pid)
        assert proc.poll() is None and len(workers) == 2, f"workers {workers}"
        os.kill(workers[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    records = _records(out)
    _scored_once(records, _expected(repeats))
    lost = [r for r in records if r["outcome"]["status"] == "failed"]
    assert all(r["outcome"]["kind"] == "agent" and "exited with code -9" in r["outcome"]["message"] for r in lost)
    assert len(records) == MCQA_ROWS * repeats + len(lost)  # a lost attempt is retried, never anything else
    cluster = json.loads((out / "cluster.json").read_text())
    assert cluster["restarts"] == 1 and cluster["lost_attempts"] == len(lost)
    assert sorted(len(p) for p in cluster["pids"]) == [1, 2]  # one slot got a new worker


def test_an_error_that_stops_a_worker_stops_the_run_naming_the_worker(tmp_path: Path) -> None:
    """What would stop a one-process run (here a model spec no backend knows, found when a worker sets up)
    stops this one too, with the same error type and the worker named; no worker is left running."""
    cfg = RunConfig(env="mcqa", limit=4, model="nosuch:model", out=str(tmp_path / "run"), cluster="local?workers=2")
    with pytest.raises(ConfigError, match=r"worker process \d: ConfigError: unknown model 'nosuch:model'"):
        asyncio.run(run_eval(cfg))
    pids = [p for ps in json.loads((tmp_path / "run" / "cluster.json").read_text())["pids"] for p in ps]
    assert len(pids) == 2 and not any(_alive(p) for p in pids)


def test_placement_ray_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a Ray cluster"):
        ProcessCollector(RunConfig(env="mcqa", cluster="local?workers=2", placement="ray"), tmp_path, [])
