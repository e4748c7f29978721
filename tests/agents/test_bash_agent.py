"""The bash agent on real sandboxed environments, and one run with two harnesses over terminal tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from palaestra.agents.bash_agent import BashAgent, parse_command
from palaestra.agents.external import CodexAdapter
from palaestra.envs.code.env import CodeEnv
from palaestra.envs.terminal.env import Terminal
from palaestra.models.scripted import ScriptedBackend
from palaestra.orchestrator import run_eval
from palaestra.placement import mount_env
from palaestra.rollout.config import RunConfig, RunEntry
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

from .conftest import require_cli

FIX = "chmod +x tools/run.sh && ./tools/run.sh"


def test_parse_command_blocks_and_tool_calls() -> None:
    text = "Let me look.\n```bash\nls -la\n```"
    assert parse_command({"content": text}) == ("ls -la", text)
    assert parse_command({"content": "no block"})[0] is None
    call = {"function": {"name": "run", "arguments": json.dumps({"cmd": "pwd"})}}
    assert parse_command({"content": None, "tool_calls": [call]})[0] == "pwd"


async def test_bash_agent_solves_a_terminal_task_in_its_sandbox() -> None:
    task = next(t for t in Terminal().examples() if t.id == "terminal-make-executable")
    replay = [{"content": "First, what is there?\n```bash\nls tools\n```"},
              {"content": "no command here"},
              {"content": f"```bash\n{FIX}\n```"},
              {"content": "```bash\nsubmit\nrun.sh is executable now.\n```"}]
    mounted = await mount_env("terminal", "inprocess")
    try:
        r = await run_rollout(task, env=mounted.client, agent=BashAgent(), model_name="replay",
                              proxy=ModelProxy(ScriptedBackend("replay", replay=replay)))
    finally:
        await mounted.stop()
    # No skip on failed(sandbox): the default provider (bubblewrap, else plain processes) exists on every
    # POSIX machine, so a sandbox failure here is the product failing.
    assert r.outcome.status == "scored", f"{r.outcome.kind}: {r.outcome.message}"
    assert r.verdict is not None and r.verdict.passed
    traj = r.trajectory
    assert [c.arguments["cmd"] for c in traj.tool_calls] == ["ls tools", FIX]
    assert "run.sh" in traj.messages[3]["content"]  # the observation of `ls tools`
    assert traj.parse_failures == 1 and traj.stop_reason == "submit"
    assert traj.final_answer == "run.sh is executable now."


async def test_bash_agent_on_the_code_env_runs_commands_through_run_python() -> None:
    task = CodeEnv().examples()[0]
    solution = task.metadata["solution"]
    replay = [{"content": "```bash\npython3 -c 'print(6*7)'\n```"},
              {"content": f"```bash\nsubmit\n```\n```python\n{solution}```"}]
    mounted = await mount_env("code", "inprocess")
    try:
        r = await run_rollout(task, env=mounted.client, agent=BashAgent(), model_name="replay",
                              proxy=ModelProxy(ScriptedBackend("replay", replay=replay)))
    finally:
        await mounted.stop()
    assert r.outcome.status == "scored", f"{r.outcome.kind}: {r.outcome.message}"  # failed(sandbox) included
    assert "42" in r.trajectory.messages[3]["content"]
    assert r.verdict is not None and r.verdict.passed, r.verdict


async def test_one_run_two_harnesses_over_terminal_tasks(tmp_path: Path) -> None:
    """Acceptance (issue 7): per-harness metrics and full trajectories, the external CLI's calls included."""
    require_cli(CodexAdapter())
    task = next(t for t in Terminal().examples() if t.id == "terminal-make-executable")
    rows = tmp_path / "tasks.jsonl"
    rows.write_text(task.model_dump_json() + "\n")
    bash_replay = tmp_path / "bash.json"
    bash_replay.write_text(json.dumps([{"content": f"```bash\n{FIX}\n```"},
                                       {"content": "```bash\nsubmit\ndone\n```"}]))
    codex_replay = tmp_path / "codex.json"
    codex_replay.write_text(json.dumps([{"tool_calls": [{"name": "exec_command", "arguments": {"cmd": FIX}}]},
                                        {"content": "done"}]))
    cfg = RunConfig(out=str(tmp_path / "run"), entries=[
        RunEntry(name="bash", input=str(rows), agent="bash", model=f"scripted:replay?file={bash_replay}"),
        RunEntry(name="codex", input=str(rows), agent="codex", model=f"scripted:replay?file={codex_replay}"),
    ])
    result = await run_eval(cfg)
    groups = result.metrics["groups"]
    by_agent: dict[str, Any] = {label.split()[1]: g for label, g in groups.items()}
    assert set(by_agent) == {"agent=bash", "agent=codex"}
    assert all(g["mean_reward"] == 1.0 and g["n_rollouts_scored"] == 1 for g in by_agent.values())
    records = {r["agent"]: r for r in map(json.loads, (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines())}
    assert len(records["bash"]["trajectory"]["model_calls"]) == 2
    codex_calls = records["codex"]["trajectory"]["model_calls"]
    assert len(codex_calls) >= 2 and codex_calls[0]["response"] is not None
    assert records["codex"]["trajectory"]["harness"]["changes"]["chmod"] == {"tools/run.sh": True}
