"""Hermes Agent and OpenHands (the SDK's default coding agent, Python 3.12), each from PyPI in a virtual
environment of its own, for real, jailed, against the scripted model over Chat Completions, on one terminal
task graded in the environment's own sandbox: every call the model served is in the trajectory, the
command it ran through its own ``terminal`` tool changed the workspace, and its final message is the answer
(Hermes: its last text; OpenHands: its ``finish`` tool's message)."""

from __future__ import annotations

from typing import Any

import pytest

from palaestra.agents.external.adapter import CLIAdapter
from palaestra.agents.external.hermes import HermesAdapter
from palaestra.agents.external.openhands import OpenHandsAdapter

from .conftest import require_cli, run_terminal_task

COMMAND = "chmod +x tools/run.sh && ./tools/run.sh"
ANSWER = "run.sh is executable now."


@pytest.mark.parametrize(("adapter_cls", "finish", "tools"), [
    (HermesAdapter, {"content": ANSWER}, {"terminal", "write_file"}),  # the toolsets the adapter asks for
    (OpenHandsAdapter, {"tool_calls": [{"name": "finish", "arguments": {"message": ANSWER}}]},
     {"terminal", "file_editor", "finish"}),  # the SDK's default agent in CLI mode
], ids=["hermes", "openhands"])
async def test_harness_solves_a_terminal_task_and_every_model_call_is_recorded(
        terminal: Any, adapter_cls: type[CLIAdapter], finish: dict[str, Any], tools: set[str]) -> None:
    adapter = adapter_cls()
    require_cli(adapter)
    replay = [{"tool_calls": [{"name": "terminal", "arguments": {"command": COMMAND}}]}, finish]
    r = await run_terminal_task(adapter, terminal, replay)
    traj = r.trajectory
    harness = traj.model_extra["harness"]
    offered = {t["function"]["name"] for t in traj.model_calls[0].request["tools"]}
    assert tools <= offered and not any("browser" in name for name in offered), offered
    assert "ok" in str(traj.model_calls[-1].request["messages"])  # ./tools/run.sh ran inside the jail
    assert traj.final_answer == ANSWER
    assert harness["dialect"] == "chat" and harness["exit_code"] == 0
    assert harness["changes"]["chmod"] == {"tools/run.sh": True}
    assert r.verdict is not None and r.verdict.passed
