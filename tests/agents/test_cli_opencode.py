"""OpenCode, for real, jailed, against the scripted model over Chat Completions
(``@ai-sdk/openai-compatible`` pointed at the rollout's endpoint through OPENCODE_CONFIG_CONTENT)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from palaestra.agents.external import OpenCodeAdapter
from palaestra.envs.terminal.env import Terminal
from palaestra.placement import mount_env

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


@pytest.fixture
async def terminal() -> AsyncIterator[Any]:
    mounted = await mount_env("terminal", "inprocess")
    yield mounted.client
    await mounted.stop()


async def test_opencode_solves_a_terminal_task_graded_in_the_envs_sandbox(terminal: Any) -> None:
    adapter = OpenCodeAdapter()
    require_cli(adapter)
    task = next(t for t in Terminal().examples() if t.id == "terminal-make-executable")
    step = {"name": "bash", "arguments": {"command": "chmod +x tools/run.sh && ./tools/run.sh", "description": "Fix"}}
    replay = [{"tool_calls": [step]}, {"content": "run.sh is executable now."}]
    backend = CountingScripted("replay", replay=replay)
    r = await run_cli(adapter, terminal, replay, task=task, backend=backend)
    assert r.outcome.status == "scored", f"{r.outcome.kind}: {r.outcome.message}"
    assert backend.served == len(r.trajectory.model_calls) == 2
    assert "ok" in str(r.trajectory.model_calls[-1].request["messages"])  # ran ./tools/run.sh inside the jail
    assert r.trajectory.model_extra["harness"]["changes"]["chmod"] == {"tools/run.sh": True}
    assert r.verdict is not None and r.verdict.passed


def test_agent_list_shows_version_and_dialect_of_every_cli() -> None:
    """`palaestra agent list` (describe_all) names each CLI's dialect and pinned version, and reads the
    installed version from the install itself (npm's package.json), not from the pin."""
    from palaestra.agents.catalog import describe_all
    from palaestra.agents.external import ADAPTERS

    rows = {r["name"]: r for r in describe_all()}
    expected = {"codex": "Responses", "claude-code": "Anthropic Messages", "mini-swe-agent": "Chat Completions",
                "opencode": "Chat Completions", "kilocode": "Chat Completions", "pi": "Chat Completions"}
    for name, dialect in expected.items():
        row, adapter = rows[name], ADAPTERS[name]()
        assert row["dialect"] == dialect and row["version"] == adapter.version and adapter.version, row
        if adapter.available():  # installed by setup-agents.sh: the version it reports is the pinned one
            assert row["installed_version"] == adapter.version, row


def test_installed_version_is_read_from_the_install(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A different version under the agents directory is reported as it is, beside the pin."""
    from palaestra.agents.catalog import describe

    pkg = tmp_path / "npm/node_modules/opencode-ai"
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text('{"name": "opencode-ai", "version": "0.0.7"}')
    monkeypatch.setenv("PALAESTRA_AGENTS_DIR", str(tmp_path))
    assert OpenCodeAdapter().installed_version() == "0.0.7"
    row = describe("opencode")
    assert row["installed_version"] == "0.0.7" and row["version"] == "1.18.33"
    assert row["dialect"] == "Chat Completions"
