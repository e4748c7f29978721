"""A real NeMo Gym resources server (``example_session_state_mgmt``: two tools and per-session state)
run as ``--env nemo_gym:<server>``: driven directly, and under the real collector killed with SIGKILL
mid-run and resumed. The server is NeMo Gym's own, in NeMo Gym's venv, on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from palaestra.core.records import Trajectory
from palaestra.rollout.journal_read import read_journal

NG = SimpleNamespace(**runpy.run_path(str(Path(__file__).parents[1] / "fixtures" / "nemo_gym.py")))
SERVER = "example_session_state_mgmt"
SPEC = f"nemo_gym:{SERVER}"

pytestmark = pytest.mark.skipif(NG.missing() is not None, reason=f"nemo-gym: {NG.missing()}")


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc), so the test can see the server processes go."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {c for c, p in parents.items() if p in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _expected_reward(task_meta: dict[str, Any], trajectory: dict[str, Any]) -> float:
    """What NeMo Gym's counter verifier must answer for this trajectory, recomputed from its tool calls."""
    count = int(task_meta["initial_count"])
    for call in trajectory["tool_calls"]:
        if call["name"] == "increment_counter" and not call.get("is_error"):
            args = call["arguments"] if isinstance(call["arguments"], dict) else json.loads(call["arguments"])
            count += int(args["count"])
    return float(count == int(task_meta["expected_count"]))


def test_sessions_hold_their_own_state_and_verify_is_nemo_gyms() -> None:
    from palaestra.envs.registry import load_env_class

    cls = load_env_class(SPEC)
    assert cls is load_env_class(SPEC) and cls.name == SPEC
    env = cls()
    tasks = env.examples()
    assert len(tasks) == 5 and {t.env for t in tasks} == {SPEC}
    assert {s["function"]["name"] for s in env.tool_schemas(tasks[0])} == {"increment_counter", "get_counter_value"}

    async def scenario() -> tuple[list[Any], list[float]]:
        right, wrong = await asyncio.gather(env.seed(tasks[0]), env.seed(tasks[0]))
        try:
            start = int(tasks[0].metadata["initial_count"])
            goal = int(tasks[0].metadata["expected_count"])
            reads = [await env.call_tool(right, "get_counter_value", {})]
            await env.call_tool(right, "increment_counter", {"count": goal - start})
            await env.call_tool(wrong, "increment_counter", {"count": goal - start + 1})
            reads += [await env.call_tool(right, "get_counter_value", {}),
                      await env.call_tool(wrong, "get_counter_value", {})]
            verdicts = [await env.verify(s, Trajectory()) for s in (right, wrong)]
            return reads, [v.reward for v in verdicts]
        finally:
            await env.close(right)
            await env.close(wrong)

    try:
        reads, rewards = asyncio.run(scenario())
    finally:
        env._process.close()
    start, goal = int(tasks[0].metadata["initial_count"]), int(tasks[0].metadata["expected_count"])
    assert reads == [{"count": start}, {"count": goal}, {"count": goal + 1}]  # one counter per session
    assert rewards == [1.0, 0.0]


def test_workplace_assistant_scores_as_nemo_gym_verifies_it(tmp_path: Path) -> None:
    """NeMo Gym's workplace assistant (tools over a mailbox, calendar and CRM held per session): the
    oracle's replayed ground-truth calls pass NeMo Gym's verify; a session with no calls does not."""
    from palaestra.envs.registry import load_env_class

    env = load_env_class("nemo_gym:workplace_assistant")()
    task = env.examples()[0]

    async def empty() -> float:
        state = await env.seed(task)
        try:
            return (await env.verify(state, Trajectory())).reward
        finally:
            await env.close(state)

    try:
        assert asyncio.run(empty()) == 0.0
    finally:
        env._process.close()
    out = tmp_path / "wa"
    done = subprocess.run([sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--env",
                           "nemo_gym:workplace_assistant", "--model", "scripted:oracle", "--out", str(out), "-q"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records, _ = read_journal(out / "rollouts.jsonl")
    assert len(records) == 5 and all(r["outcome"]["status"] == "scored" for r in records)
    assert all(r["verdict"]["reward"] == 1.0 and r["trajectory"]["tool_calls"] for r in records)


def _eval_cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "palaestra.cli.main", "eval", "run", "--env", SPEC,
            "--model", "scripted:oracle?latency_ms=150", "-k", "3", "-c", "2", "--out", str(out), "-q"]


def _scored(out: Path) -> Counter[tuple[str, int]]:
    records, _ = read_journal(out / "rollouts.jsonl")
    return Counter((r["task_id"], r["repeat"]) for r in records if r["outcome"]["status"] == "scored")


@pytest.mark.timeout(600)
def test_collector_killed_with_sigkill_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(_eval_cmd(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    servers: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "rollouts.jsonl").exists() and sum(_scored(out).values()) >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read()[-2000:]}"
        servers = _children(proc.pid)
        assert servers, "the NeMo Gym server should run as a child of the collector"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before = _scored(out)
        assert 0 < sum(before.values()) < 15
        gone_by = time.monotonic() + 60  # the orphaned server exits when its stdin closes
        while time.monotonic() < gone_by and any(_alive(p) for p in servers):
            time.sleep(0.1)
        assert not any(_alive(p) for p in servers), "the NeMo Gym server outlived the killed collector"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in servers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    done = subprocess.run(_eval_cmd(out), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    after = _scored(out)
    slots = {(f"{SERVER}-example-{i}", r) for i in range(1, 6) for r in range(3)}
    assert set(after) == slots and all(n == 1 for n in after.values())  # none lost, none duplicated
    assert all(after[k] >= n for k, n in before.items())
    tasks = {json.loads(line)["id"]: json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()}
    records, _ = read_journal(out / "rollouts.jsonl")
    for r in (r for r in records if r["outcome"]["status"] == "scored"):
        assert r["verdict"]["metadata"]["nemo_gym_server"] == SERVER
        assert r["verdict"]["reward"] == _expected_reward(tasks[r["task_id"]]["metadata"], r["trajectory"]) == 1.0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["overall"]["coverage"] == 1.0 and metrics["overall"]["mean_reward"] == 1.0
    _reverify_replays_the_calls_on_fresh_nemo_gym_sessions(out, tasks, tmp_path / "doctored")


def _reverify(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "palaestra.cli.main", "eval", "reverify", str(run_dir)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    diff = [json.loads(line) for line in (run_dir / "reverify_diff.jsonl").read_text().splitlines() if line]
    return diff, json.loads((run_dir / "metrics.reverify.json").read_text())


def _reverify_replays_the_calls_on_fresh_nemo_gym_sessions(out: Path, tasks: dict[str, Any], doctored: Path) -> None:
    """``eval reverify`` of the resumed run: each trajectory's tool calls are replayed on a fresh session of
    NeMo Gym's server (its counter state is rebuilt by them) and NeMo Gym's verify gives the same verdicts.
    With the increments taken out of the stored trajectories, the replayed state falls short and the
    verdicts change: the reward comes from the replayed session, not from the journal."""
    diff, metrics = _reverify(out)
    assert diff == [] and metrics["overall"]["mean_reward"] == 1.0 and metrics["overall"]["coverage"] == 1.0
    shutil.copytree(out, doctored)
    journal = doctored / "rollouts.jsonl"
    lines = []
    for line in journal.read_text().splitlines():
        record = json.loads(line)
        if isinstance(record.get("trajectory"), dict):
            calls = record["trajectory"].get("tool_calls") or []
            record["trajectory"]["tool_calls"] = [c for c in calls if c.get("name") != "increment_counter"]
        lines.append(json.dumps(record))
    journal.write_text("\n".join(lines) + "\n")
    diff, metrics = _reverify(doctored)
    moved = {t for t, row in tasks.items() if row["metadata"]["initial_count"] != row["metadata"]["expected_count"]}
    assert moved, "every example task needs increments: nothing for reverify to tell apart"
    assert {d["task_id"] for d in diff} == moved and all(d["after"]["reward"] == 0.0 for d in diff)
    assert metrics["overall"]["coverage"] == 1.0


def test_the_launched_server_accepts_connections_from_the_moment_it_names_its_port() -> None:
    """CI saw ``/seed_session`` refused (ConnectError) on a busy machine: the launcher printed its port
    once the socket was bound, and uvicorn only listened later. Frozen right after the print (SIGSTOP, so
    uvicorn cannot start), the server must still accept a connection: it listens before it says where."""
    import socket

    from palaestra.adapters.nemo_gym_launch import NemoServerProcess

    server = NemoServerProcess(SERVER, None)
    try:
        url = server._start()
        assert server._proc is not None
        os.kill(server._proc.pid, signal.SIGSTOP)
        try:
            port = int(url.rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass  # the kernel completes the handshake into the listen backlog: no ECONNREFUSED
        finally:
            os.kill(server._proc.pid, signal.SIGCONT)
    finally:
        server.close()
