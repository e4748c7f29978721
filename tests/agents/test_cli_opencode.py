"""OpenCode, for real, jailed, against the scripted model over Chat Completions
(``@ai-sdk/openai-compatible`` pointed at the rollout's endpoint through OPENCODE_CONFIG_CONTENT)."""

from __future__ import annotations

from typing import Any

from palaestra.agents.external import OpenCodeAdapter

from .conftest import SHELL_STEP, CountingScripted, require_cli, run_cli

REPLAY = [
    {"tool_calls": [{"name": "bash", "arguments": {"command": SHELL_STEP, "description": "Make the files"}}]},
    {"content": "Created made.txt and removed old.txt."},
]


async def test_opencode_runs_scripted_command_and_hands_files_back(files_env: Any) -> None:
    adapter = OpenCodeAdapter()
    require_cli(adapter)
    backend = CountingScripted("replay", replay=REPLAY)
    r = await run_cli(adapter, files_env, REPLAY, backend=backend)
    assert r.outcome.status == "scored", f"{r.outcome.kind}: {r.outcome.message}"
    traj = r.trajectory
    calls = traj.model_calls
    # Every call the model served is in the trajectory (no side call escaped the record), all answered.
    assert backend.served == len(calls) == traj.model_extra["harness"]["model_calls"] == 2
    assert all(c.response is not None for c in calls)
    assert calls[0].request["tools"] and "bash" in [t["function"]["name"] for t in calls[0].request["tools"]]
    assert "did-it" in str(calls[-1].request["messages"])  # the command ran; its output reached the model
    roles = [m["role"] for m in traj.messages]
    assert roles[-3:] == ["assistant", "tool", "assistant"]
    assert traj.messages[-3]["tool_calls"][0]["function"]["name"] == "bash"
    assert traj.final_answer == "Created made.txt and removed old.txt." and traj.stop_reason == "final"
    harness = traj.model_extra["harness"]
    assert harness["dialect"] == "chat" and harness["exit_code"] == 0
    assert harness["changes"]["written"] == {"made.txt": "seeded\nhi\n"}
    assert harness["changes"]["deleted"] == ["old.txt"]
    assert r.verdict is not None and r.verdict.passed
