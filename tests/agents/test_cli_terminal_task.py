"""OpenCode, KiloCode and Pi, for real, jailed, against the scripted model over Chat Completions, on one
terminal task graded in the environment's own sandbox: every call the model served is in the trajectory.

OpenCode and Kilo are pointed at the rollout's endpoint through their config variable
(``@ai-sdk/openai-compatible``), Pi through ``$PI_CODING_AGENT_DIR/models.json`` (``api: "openai-completions"``).
OpenCode's and Kilo's bash tool requires a ``description`` argument; Pi's has none."""

from __future__ import annotations

from typing import Any

import pytest

from palaestra.agents.external import KiloCodeAdapter, OpenCodeAdapter, PiAdapter
from palaestra.agents.external.adapter import CLIAdapter

from .conftest import require_cli, run_terminal_task

COMMAND = "chmod +x tools/run.sh && ./tools/run.sh"


@pytest.mark.parametrize(("adapter_cls", "step_args"), [
    (OpenCodeAdapter, {"command": COMMAND, "description": "Fix"}),
    (KiloCodeAdapter, {"command": COMMAND, "description": "Fix"}),
    (PiAdapter, {"command": COMMAND}),
], ids=["opencode", "kilocode", "pi"])
async def test_harness_solves_a_terminal_task_and_every_model_call_is_recorded(
        terminal: Any, adapter_cls: type[CLIAdapter], step_args: dict[str, str]) -> None:
    adapter = adapter_cls()
    require_cli(adapter)
    replay = [{"tool_calls": [{"name": "bash", "arguments": step_args}]}, {"content": "run.sh is executable now."}]
    r = await run_terminal_task(adapter, terminal, replay)
    traj = r.trajectory
    assert "bash" in [t["function"]["name"] for t in traj.model_calls[0].request["tools"]]
    assert "ok" in str(traj.model_calls[-1].request["messages"])  # ran ./tools/run.sh inside the jail
    assert [m["role"] for m in traj.messages][-3:] == ["assistant", "tool", "assistant"]
    assert traj.final_answer == "run.sh is executable now." and traj.stop_reason == "final"
    harness = traj.model_extra["harness"]
    assert harness["dialect"] == "chat" and harness["exit_code"] == 0
    assert harness["changes"]["chmod"] == {"tools/run.sh": True}
    assert r.verdict is not None and r.verdict.passed
