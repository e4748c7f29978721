"""mini-SWE-agent, for real, jailed, against the scripted model over OpenAI Chat Completions (litellm)."""

from __future__ import annotations

from typing import Any

from palaestra.agents.external import MiniSweAgentAdapter

from .conftest import SHELL_STEP, require_cli, run_cli

SUBMIT = "printf 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\\nmade.txt is written\\n'"
REPLAY = [
    {"content": "Making the file.", "tool_calls": [{"name": "bash", "arguments": {"command": SHELL_STEP}}]},
    {"content": "Submitting.", "tool_calls": [{"name": "bash", "arguments": {"command": SUBMIT}}]},
]


async def test_mini_swe_agent_runs_scripted_command_and_hands_files_back(files_env: Any) -> None:
    adapter = MiniSweAgentAdapter()
    require_cli(adapter)
    r = await run_cli(adapter, files_env, REPLAY)
    assert r.outcome.status == "scored", r.outcome.message
    traj = r.trajectory
    calls = traj.model_calls
    assert len(calls) == 2 and all(c.response is not None for c in calls)
    assert "did-it" in str(calls[1].request["messages"])  # the command ran; its output reached the model
    assert calls[0].request["tools"][0]["function"]["name"] == "bash"
    roles = [m["role"] for m in traj.messages]
    assert roles[:2] == ["system", "user"] and roles[-3:] == ["assistant", "tool", "assistant"]
    assert traj.messages[-1]["tool_calls"][0]["function"]["arguments"].endswith('is written\\\\n\'"}')
    assert traj.final_answer == "made.txt is written\n"  # mini's submission, read from its trajectory file
    harness = traj.model_extra["harness"]
    assert harness["dialect"] == "chat" and harness["exit_code"] == 0
    assert harness["changes"]["written"] == {"made.txt": "seeded\nhi\n"}
    assert harness["changes"]["deleted"] == ["old.txt"]
    assert r.verdict is not None and r.verdict.passed
