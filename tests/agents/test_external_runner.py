"""The generic external-CLI runner with a stand-in CLI (tests/agents/fake_cli.py): the jail, the
per-rollout endpoint, the workspace bridge, the rebuilt trajectory, and every failure typed."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from palaestra.agents.external import ExternalCLIAgent
from palaestra.agents.external.adapter import CLIAdapter, LaunchContext
from palaestra.core.errors import ModelError
from palaestra.core.records import Rollout
from palaestra.models.scripted import ScriptedBackend
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

from .conftest import FILES_TASK, require_jail

FAKE_CLI = str(Path(__file__).with_name("fake_cli.py"))


class FakeAdapter(CLIAdapter):
    name = "fake-cli"
    dialect = "chat"
    executable = "python3"
    package = "tests/agents/fake_cli.py"

    def __init__(self, mode: str, arg: str = "") -> None:
        self.mode, self.arg = mode, arg

    def locate(self) -> str:
        return sys.executable

    def command(self, ctx: LaunchContext) -> list[str]:
        return [ctx.executable, "-I", "-S", FAKE_CLI, ctx.base_url, self.mode, self.arg or ctx.prompt]


@pytest.fixture(autouse=True)
def _jail() -> None:
    require_jail()


async def _run(env: Any, adapter: CLIAdapter, backend: Any = None, **kw: Any) -> Rollout:
    proxy = ModelProxy(backend or ScriptedBackend("constant", constant_text="on it"))
    sampling = kw.pop("sampling", None)
    agent = ExternalCLIAgent(adapter, **kw)
    return await run_rollout(FILES_TASK, env=env, agent=agent, proxy=proxy, model_name="scripted",
                             deadline_s=60, sampling=sampling)


async def test_files_go_in_and_out_through_the_env_tools_and_calls_are_recorded(files_env: Any) -> None:
    r = await _run(files_env, FakeAdapter("work"), sampling={"temperature": 0.0})
    assert r.outcome.status == "scored", r.outcome.message
    traj = r.trajectory
    assert len(traj.model_calls) == 1 and traj.model_calls[0].request["temperature"] == 0.0  # run's sampling wins
    assert traj.messages == [{"role": "user", "content": FILES_TASK.input}, {"role": "assistant", "content": "on it"}]
    assert traj.final_answer == "on it" and traj.stop_reason == "final" and traj.steps == 1
    assert traj.model_extra is not None
    harness = traj.model_extra["harness"]
    assert harness["seeded_files"] == 2 and harness["exit_code"] == 0 and "on it" in harness["stdout_tail"]
    assert harness["changes"] == {"written": {"made.txt": "SEEDED\n"}, "deleted": ["old.txt"],
                                  "chmod": {"made.txt": True}, "skipped": []}
    calls = [(c.name, c.arguments) for c in traj.tool_calls]
    assert [name for name, _ in calls] == ["run", "read_file", "read_file", "write_file", "run", "run"]
    assert calls[-2:] == [("run", {"cmd": "rm -f -- old.txt"}), ("run", {"cmd": "chmod +x -- made.txt"})]
    assert r.verdict is not None and not r.verdict.passed  # SEEDED is not what the task expects: graded as is


async def test_jail_reaches_the_proxy_and_nothing_else(files_env: Any) -> None:
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    host.setblocking(False)
    try:
        r = await _run(files_env, FakeAdapter("probe", str(host.getsockname()[1])))
        with pytest.raises(BlockingIOError):
            host.accept()  # nobody connected to the host's listener
    finally:
        host.close()
    assert r.outcome.status == "scored", r.outcome.message
    assert r.trajectory.model_extra is not None
    probe = json.loads(r.trajectory.model_extra["harness"]["changes"]["written"]["probe.json"])
    assert probe == {"interfaces": ["lo"], "routes": 0, "host_listener": "ConnectionRefusedError"}
    assert len(r.trajectory.model_calls) == 1  # ... while the proxy, forwarded in, answered


async def test_cli_that_never_reaches_the_model_is_an_agent_failure(files_env: Any) -> None:
    r = await _run(files_env, FakeAdapter("exit"))
    assert r.outcome.status == "failed" and r.outcome.kind == "agent" and r.verdict is None
    assert "exited with status 3" in (r.outcome.message or "") and "giving up" in (r.outcome.message or "")


async def test_model_error_is_a_model_failure_not_the_clis(files_env: Any) -> None:
    r = await _run(files_env, FakeAdapter("work"), ScriptedBackend("constant", failure_rate=1.0))
    assert r.outcome.status == "failed" and r.outcome.kind == "model"
    assert r.trajectory.model_calls and r.trajectory.model_calls[0].error is not None


class FailsFirstCall:
    name = "fails-first"

    def __init__(self) -> None:
        self.calls = 0
        self.inner = ScriptedBackend("constant", constant_text="second try")

    async def chat(self, request: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            raise ModelError("transient upstream failure", status=503)
        return await self.inner.chat(request, ctx)

    async def aclose(self) -> None:
        return None


async def test_model_error_the_cli_retried_past_is_no_failure(files_env: Any) -> None:
    r = await _run(files_env, FakeAdapter("retry"), FailsFirstCall())
    assert r.outcome.status == "scored", r.outcome.message
    assert [c.error is not None for c in r.trajectory.model_calls] == [True, False]
    assert r.trajectory.final_answer == "second try"


async def test_call_limit_stops_a_runaway_cli(files_env: Any) -> None:
    r = await _run(files_env, FakeAdapter("loop"), max_steps=2)
    assert r.outcome.status == "scored", r.outcome.message
    assert len(r.trajectory.model_calls) == 8  # 2 * max_steps + 4 reached the model, the next was refused
    assert r.trajectory.stop_reason == "max_steps"


async def test_detached_processes_die_with_the_run(files_env: Any, tmp_path: Path) -> None:
    marker = tmp_path / "late"
    r = await _run(files_env, FakeAdapter("daemon", str(marker)))
    assert r.outcome.status == "scored", r.outcome.message
    assert marker.with_name("late.started").exists()  # the grandchild did start
    # Wait for no process to carry the marker in its command line (bounded only against a hang): a
    # grandchild that survived would run on to write the marker and exit, so the check cannot race.
    deadline = time.monotonic() + 60
    while _processes_mentioning(str(marker)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not _processes_mentioning(str(marker))
    assert not marker.exists()  # the PID namespace took the setsid'd grandchild with it


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (the fake CLI's grandchild keeps its parent's argv)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


async def test_timeout_kills_the_cli(files_env: Any) -> None:
    t0 = time.monotonic()
    r = await _run(files_env, FakeAdapter("sleep"), timeout_s=1.0)
    assert r.outcome.status == "failed" and r.outcome.kind == "agent"
    assert "1 s limit" in (r.outcome.message or "") and time.monotonic() - t0 < 10


async def test_missing_cli_says_how_to_install_it(files_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from palaestra.agents.external import CodexAdapter

    monkeypatch.setenv("PALAESTRA_AGENTS_DIR", "/nonexistent")
    monkeypatch.setenv("PATH", "/nonexistent")
    r = await _run(files_env, CodexAdapter())
    assert r.outcome.status == "failed" and r.outcome.kind == "agent"
    assert "@openai/codex" in (r.outcome.message or "") and "setup-agents.sh" in (r.outcome.message or "")
