"""A harness served by ``palaestra agent serve`` and rows routed to it with ``--agent remote:URL``, end to end:
the agent server is a real process on 127.0.0.1 (its URL and token file read from what it printed), the
runs are real ``eval run`` processes (or ``run_eval`` in this process) with their environments as local
server processes. What must hold: the rows are scored by the environment as with a local harness, every
model call the remote harness made is in the trajectory, and each fault gets the failure kind a local
harness gives it (server down or token refused: agent; model: model; environment: environment)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from palaestra.core.records import Rollout
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig
from palaestra.rollout.results import read_rollouts

CLI = [sys.executable, "-m", "palaestra.cli.main"]
FAULTY_ENV = f"{Path(__file__).parent / 'faulty_env.py'}:FaultyEnv"


def _env() -> dict[str, str]:
    """The CLI's environment without a token of the caller's: each server makes (and prints) its own."""
    return {k: v for k, v in os.environ.items() if k != "PALAESTRA_TOKEN"}


class AgentServer:
    """``palaestra agent serve NAME --port 0`` as a process; its URL is read from the line it prints."""

    def __init__(self, name: str, token_file: Path, *extra: str) -> None:
        self.token_file = token_file
        self.proc = subprocess.Popen([*CLI, "agent", "serve", name, "--port", "0", "--token-file", str(token_file),
                                      *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=_env())
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = self._wait_for(r"palaestra agent '\S+' on (http://127\.0\.0\.1:\d+)").group(1)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        self.proc.wait()
        with self._changed:
            self._changed.notify_all()

    def _wait_for(self, pattern: str, timeout: float = 120.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if m := re.search(pattern, line):
                        return m
                if not self._reader.is_alive():  # the process closed its output: it has exited
                    raise AssertionError(f"agent server exited {self.proc.returncode}:\n" + "\n".join(self.lines))
                if time.monotonic() > deadline:
                    raise AssertionError(f"no line matching {pattern!r} within {timeout:g} s:\n"
                                         + "\n".join(self.lines))
                self._changed.wait(0.5)

    @property
    def spec(self) -> str:
        return f"remote:{self.url}?token_file={self.token_file}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    server = AgentServer("tool", tmp_path_factory.mktemp("agent") / "agent.token")
    try:
        assert server.token_file.is_file() and len(server.token_file.read_text().strip()) >= 16
        assert oct(server.token_file.stat().st_mode & 0o777) == "0o600"
        yield server
    finally:
        server.stop()


def _eval(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "eval", "run", "-q", *args], capture_output=True, text=True, timeout=timeout,
                          env=_env())


def _rollouts(run_dir: Path) -> list[Rollout]:
    records, rollouts, problems, invalid = read_rollouts(run_dir / "rollouts.jsonl")
    assert not problems and not invalid, (problems, invalid)
    assert len(rollouts) == len(records)
    return rollouts


def test_eval_routes_rows_to_the_agent_server(tool_server: AgentServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = _eval(["--env", "workplace", "--agent", tool_server.spec, "--model", "scripted:oracle", "--limit", "3",
                  "--out", str(out)])
    assert done.returncode == 0, done.stdout + done.stderr
    rollouts = _rollouts(out)
    assert len(rollouts) == 3
    for r in rollouts:
        assert r.outcome.status == "scored", r.outcome
        assert r.verdict is not None and r.verdict.reward == 1.0, r.verdict
        assert r.agent == f"remote:{tool_server.url}"
        # The oracle answers each step of the reference: every one of those calls went through the run's
        # proxy (served to the agent server per rollout) and is recorded here, with the tool calls it made.
        calls = r.trajectory.model_calls
        assert len(calls) >= 2 and all(c.status == 200 for c in calls), calls
        assert len(r.trajectory.tool_calls) == len(calls) - 1
        asked = [t["function"]["name"] for c in calls[:-1]
                 for t in (c.response or {})["choices"][0]["message"]["tool_calls"]]
        assert [c.name for c in r.trajectory.tool_calls] == asked
        assert r.usage.model_calls == len(calls)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["overall"]["mean_reward"] == 1.0 and metrics["overall"]["coverage"] == 1.0, metrics["overall"]


def test_a_stopped_agent_server_is_failed_agent(tmp_path: Path) -> None:
    server = AgentServer("tool", tmp_path / "agent.token")
    spec = server.spec
    server.stop()
    out = tmp_path / "run"
    done = _eval(["--env", "workplace", "--agent", spec, "--model", "scripted:oracle", "--limit", "1",
                  "--max-attempts", "2", "--out", str(out)])
    assert done.returncode != 0, done.stdout + done.stderr
    assert "failed(agent)" in done.stdout + done.stderr and "is unreachable" in done.stdout + done.stderr
    rollouts = _rollouts(out)
    assert len(rollouts) == 2  # an infrastructure failure is retried, then left failed: never a 0
    for r in rollouts:
        assert r.outcome.status == "failed" and r.outcome.kind == "agent", r.outcome
        assert f"agent server at {server.url} is unreachable" in (r.outcome.message or ""), r.outcome
        assert r.verdict is None


def _cfg(tmp_path: Path, name: str, **kw: Any) -> RunConfig:
    base: dict[str, Any] = {"model": "scripted:oracle", "limit": 1, "max_attempts": 1, "out": str(tmp_path / name),
                            "min_coverage": 0.0, "deadline_s": 120.0}
    return RunConfig(**{**base, **kw})


async def _only(cfg: RunConfig) -> Rollout:
    result = await run_eval(cfg)
    rollouts = _rollouts(result.run_dir)
    assert len(rollouts) == 1
    return rollouts[0]


@pytest.mark.parametrize(("case", "kind", "fragment"), [
    ("model", "model", "scripted failure"),
    ("environment", "environment", "backing store is down"),
])
async def test_faults_inside_the_remote_agent_keep_their_kind(tool_server: AgentServer, tmp_path: Path, case: str,
                                                             kind: str, fragment: str) -> None:
    """The same fault with the harness here and on the agent server: the same failure kind."""
    if case == "model":  # the scripted model fails every call; the workplace env itself is fine
        kw: dict[str, Any] = {"env": "workplace", "model": "scripted:oracle?failure_rate=1"}
    else:  # the environment's one tool raises an infrastructure failure
        rows = tmp_path / "rows.jsonl"
        rows.write_text(json.dumps({"id": "faulty-1", "input": "Reach the backing store."}) + "\n")
        kw = {"env": FAULTY_ENV, "input": str(rows), "model": "scripted:oracle"}
    local = await _only(_cfg(tmp_path, "local", agent="tool", **kw))
    remote = await _only(_cfg(tmp_path, "remote", agent=tool_server.spec, **kw))
    assert local.outcome.status == "failed" and local.outcome.kind == kind, local.outcome
    assert remote.outcome.status == "failed" and remote.outcome.kind == kind, remote.outcome
    assert fragment in (local.outcome.message or "") and fragment in (remote.outcome.message or ""), remote.outcome
    assert remote.verdict is None
    # The failed model call is on record in the rollout, as it is for the local harness.
    assert len(remote.trajectory.model_calls) == len(local.trajectory.model_calls) >= 1


async def test_the_rollout_deadline_holds_for_a_remote_agent(tool_server: AgentServer, tmp_path: Path) -> None:
    """A model slower than the deadline: timed out, as with a local harness (never a score)."""
    kw: dict[str, Any] = {"env": "workplace", "model": "scripted:oracle?latency_ms=5000", "deadline_s": 1.0}
    local = await _only(_cfg(tmp_path, "local", agent="tool", **kw))
    remote = await _only(_cfg(tmp_path, "remote", agent=tool_server.spec, **kw))
    for r in (local, remote):
        assert r.outcome.status == "timed_out" and r.outcome.kind == "timeout", r.outcome
        assert "during agent" in (r.outcome.message or "") and r.verdict is None


async def test_a_row_names_the_remote_agent(tool_server: AgentServer, tmp_path: Path) -> None:
    """``agent: remote:URL`` in a row routes that row (the run's own agent stays the local default)."""
    from palaestra.envs.registry import load_env

    task = load_env("workplace").examples()[0]
    rows = tmp_path / "rows.jsonl"
    rows.write_text(task.model_copy(update={"agent": tool_server.spec}).model_dump_json() + "\n")
    r = await _only(_cfg(tmp_path, "row", env="workplace", input=str(rows), agent="tool"))
    assert r.outcome.status == "scored" and r.verdict is not None and r.verdict.reward == 1.0, r.outcome
    assert r.agent == f"remote:{tool_server.url}" and len(r.trajectory.model_calls) >= 2


async def test_a_missing_token_is_failed_agent_with_the_fix(tool_server: AgentServer, tmp_path: Path) -> None:
    r = await _only(_cfg(tmp_path, "notoken", env="workplace", agent=f"remote:{tool_server.url}"))
    assert r.outcome.status == "failed" and r.outcome.kind == "agent", r.outcome
    assert "refused the request" in (r.outcome.message or "") and "token_file" in (r.outcome.message or "")


def test_agent_list_shows_the_builtins_and_what_they_need() -> None:
    done = subprocess.run([*CLI, "agent", "list", "--json"], capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert {"tool", "single", "bash", "codex", "claude-code", "mini-swe-agent", "langgraph", "remote"} <= set(rows)
    assert rows["tool"]["installed"] is True and rows["tool"]["missing"] == []
    assert "codex" in rows["codex"]["needs"]["binaries"] and "namespace" in rows["codex"]["needs"]["network"]
    assert rows["langgraph"]["needs"]["extra"] == "langgraph"
    for r in rows.values():  # installed means nothing is missing, and the reverse
        assert r["installed"] == (not r["missing"]), r
    info = subprocess.run([*CLI, "agent", "info", "codex"], capture_output=True, text=True, timeout=120, env=_env())
    assert info.returncode == 0 and json.loads(info.stdout)["name"] == "codex", info.stderr
    unknown = subprocess.run([*CLI, "agent", "info", "nope"], capture_output=True, text=True, timeout=120, env=_env())
    assert unknown.returncode != 0 and "unknown agent 'nope'" in unknown.stdout + unknown.stderr
