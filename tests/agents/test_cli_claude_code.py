"""Anthropic's Claude Code, for real, jailed, against the scripted model over the Messages API."""

from __future__ import annotations

from typing import Any

from palaestra.agents.external import ClaudeCodeAdapter

from .conftest import SHELL_STEP, require_cli, run_cli

REPLAY = [
    {"content": "Making the file.",
     "tool_calls": [{"name": "Bash", "arguments": {"command": SHELL_STEP, "description": "make the file"}}]},
    {"content": "Created made.txt and removed old.txt."},
]


async def test_claude_code_runs_scripted_command_and_hands_files_back(files_env: Any) -> None:
    adapter = ClaudeCodeAdapter()
    require_cli(adapter)
    r = await run_cli(adapter, files_env, REPLAY)
    assert r.outcome.status == "scored", r.outcome.message
    traj = r.trajectory
    calls = traj.model_calls
    assert len(calls) >= 2 and all(c.response is not None for c in calls)
    assert "did-it" in str(calls[-1].request["messages"])  # the command ran; its output reached the model
    roles = [m["role"] for m in traj.messages]
    assert roles[-3:] == ["assistant", "tool", "assistant"]
    assert traj.messages[-3]["tool_calls"][0]["function"]["name"] == "Bash"
    assert traj.final_answer == "Created made.txt and removed old.txt." and traj.stop_reason == "final"
    harness = traj.model_extra["harness"]
    assert harness["dialect"] == "messages" and harness["exit_code"] == 0
    assert harness["changes"]["written"] == {"made.txt": "seeded\nhi\n"}
    assert harness["changes"]["deleted"] == ["old.txt"]
    assert r.verdict is not None and r.verdict.passed
