"""OpenAI's Codex CLI, for real, jailed, against the scripted model over the Responses API."""

from __future__ import annotations

from typing import Any

from palaestra.agents.external import CodexAdapter
from palaestra.envs.terminal.env import Terminal

from .conftest import SHELL_STEP, require_cli, run_cli

REPLAY = [
    {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": SHELL_STEP}}]},
    {"content": "Created made.txt and removed old.txt."},
]


async def test_codex_runs_scripted_command_and_hands_files_back(files_env: Any) -> None:
    adapter = CodexAdapter()
    require_cli(adapter)
    r = await run_cli(adapter, files_env, REPLAY)
    assert r.outcome.status == "scored", r.outcome.message
    traj = r.trajectory
    # The CLI ran the scripted command: its output went back to the model on the second call.
    calls = traj.model_calls
    assert len(calls) >= 2 and all(c.response is not None for c in calls)
    assert "did-it" in str(calls[-1].request["messages"])
    # The rebuilt trajectory holds the tool call, its result and the final answer.
    roles = [m["role"] for m in traj.messages]
    assert roles[-3:] == ["assistant", "tool", "assistant"]
    assert traj.messages[-3]["tool_calls"][0]["function"]["name"] == "exec_command"
    assert traj.final_answer == "Created made.txt and removed old.txt." and traj.stop_reason == "final"
    # The files it changed reached the environment through its tools, and the verifier saw them.
    harness = traj.model_extra["harness"]
    assert harness["changes"]["written"] == {"made.txt": "seeded\nhi\n"}
    assert harness["changes"]["deleted"] == ["old.txt"] and harness["dialect"] == "responses"
    assert r.verdict is not None and r.verdict.passed
    assert ("write_file", {"path": "made.txt", "content": "seeded\nhi\n"}) in [
        (c.name, c.arguments) for c in traj.tool_calls]


async def test_codex_solves_a_terminal_task_graded_in_the_envs_sandbox(terminal: Any) -> None:
    """The workspace comes from the env's sandbox, the CLI's chmod goes back to it, test.sh grades it."""
    adapter = CodexAdapter()
    require_cli(adapter)
    task = next(t for t in Terminal().examples() if t.id == "terminal-make-executable")
    step = {"name": "exec_command", "arguments": {"cmd": "chmod +x tools/run.sh && ./tools/run.sh"}}
    replay = [{"tool_calls": [step]}, {"content": "run.sh is executable now."}]
    r = await run_cli(adapter, terminal, replay, task=task)
    # The terminal env's default sandbox provider exists on every POSIX machine: failed(sandbox) fails the test.
    assert r.outcome.status == "scored", f"{r.outcome.kind}: {r.outcome.message}"
    assert "ok" in str(r.trajectory.model_calls[-1].request["messages"])  # ran ./tools/run.sh inside the jail
    assert r.trajectory.model_extra["harness"]["changes"]["chmod"] == {"tools/run.sh": True}
    assert r.verdict is not None and r.verdict.passed
