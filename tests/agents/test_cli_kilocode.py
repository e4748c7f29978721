"""KiloCode, for real, jailed, against the scripted model over Chat Completions (KILO_CONFIG_CONTENT
with an ``@ai-sdk/openai-compatible`` provider at the rollout's endpoint), on the terminal environment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from palaestra.agents.external import KiloCodeAdapter
from palaestra.envs.terminal.env import Terminal
from palaestra.placement import mount_env

from .conftest import CountingScripted, require_cli, run_cli


@pytest.fixture
async def terminal() -> AsyncIterator[Any]:
    mounted = await mount_env("terminal", "inprocess")
    yield mounted.client
    await mounted.stop()


async def test_kilocode_solves_a_terminal_task_and_every_model_call_is_recorded(terminal: Any) -> None:
    adapter = KiloCodeAdapter()
    require_cli(adapter)
    task = next(t for t in Terminal().examples() if t.id == "terminal-make-executable")
    step = {"name": "bash", "arguments": {"command": "chmod +x tools/run.sh && ./tools/run.sh", "description": "Fix"}}
    replay = [{"tool_calls": [step]}, {"content": "run.sh is executable now."}]
    backend = CountingScripted("replay", replay=replay)
    r = await run_cli(adapter, terminal, replay, task=task, backend=backend)
    assert r.outcome.status == "scored", f"{r.outcome.kind}: {r.outcome.message}"
    traj = r.trajectory
    assert backend.served == len(traj.model_calls) == traj.model_extra["harness"]["model_calls"] == 2
    assert all(c.response is not None for c in traj.model_calls)
    assert "bash" in [t["function"]["name"] for t in traj.model_calls[0].request["tools"]]
    assert "ok" in str(traj.model_calls[-1].request["messages"])  # ran ./tools/run.sh inside the jail
    assert [m["role"] for m in traj.messages][-3:] == ["assistant", "tool", "assistant"]
    assert traj.final_answer == "run.sh is executable now." and traj.stop_reason == "final"
    harness = traj.model_extra["harness"]
    assert harness["dialect"] == "chat" and harness["exit_code"] == 0
    assert harness["changes"]["chmod"] == {"tools/run.sh": True}
    assert r.verdict is not None and r.verdict.passed
