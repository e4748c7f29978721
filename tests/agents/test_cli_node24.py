"""The CLIs that run on the Node 24 setup-agents.sh takes from npm (Qwen Code, Gemini CLI, OpenClaw), for
real, jailed, against the scripted model: one shell command that makes and deletes files, then a final
answer. The trajectory is scored, every call the model served is in it, and the files reached the
environment's verifier.

Each CLI names its shell tool and arguments its own way; the scripted policy uses that CLI's names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from palaestra.agents.catalog import describe
from palaestra.agents.external import ExternalCLIAgent, GeminiCLIAdapter, OpenClawAdapter, QwenCodeAdapter
from palaestra.agents.external.adapter import CLIAdapter, LaunchContext
from palaestra.agents.external.node24 import bundled_node
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

from .conftest import FILES_TASK, SHELL_STEP, CountingScripted, require_cli, require_jail

# OpenClaw's start-up alone takes tens of CPU seconds; on a loaded machine a run needs minutes (a bound only).
pytestmark = pytest.mark.timeout(600)
FINAL = "Created made.txt and removed old.txt."

CASES: list[tuple[type[CLIAdapter], str, dict[str, str]]] = [
    (QwenCodeAdapter, "run_shell_command", {"command": SHELL_STEP}),
    (GeminiCLIAdapter, "run_shell_command", {"command": SHELL_STEP}),  # over the Gemini dialect
    (OpenClawAdapter, "exec", {"command": SHELL_STEP}),
]


@pytest.mark.parametrize(("adapter_cls", "tool", "args"), CASES, ids=[c[0].name for c in CASES])
async def test_cli_on_node24_runs_a_command_and_every_model_call_is_recorded(
        files_env: Any, adapter_cls: type[CLIAdapter], tool: str, args: dict[str, str]) -> None:
    adapter = adapter_cls()
    require_cli(adapter)
    replay = [{"tool_calls": [{"name": tool, "arguments": args}]}, {"content": FINAL}]
    backend = CountingScripted("replay", replay=replay)
    r = await run_rollout(FILES_TASK, env=files_env, agent=ExternalCLIAgent(adapter), proxy=ModelProxy(backend),
                          model_name="scripted", deadline_s=600)
    assert r.outcome.status == "scored", f"{r.outcome.kind}: {r.outcome.message}"
    traj = r.trajectory
    calls = traj.model_calls
    assert traj.model_extra is not None
    harness = traj.model_extra["harness"]
    # Every call the model served is in the trajectory (no side call escaped the record), all answered.
    assert backend.served == len(calls) == harness["model_calls"] >= 2, harness["stderr_tail"]
    assert all(c.response is not None for c in calls)
    assert tool in [t["function"]["name"] for t in calls[0].request["tools"]]
    assert "did-it" in str(calls[-1].request["messages"])  # the command ran; its output reached the model
    # The conversation: the tool call, its output, the final answer (OpenClaw adds a user turn of its own
    # internal context after a tool result, and renames call ids; both are kept as the CLI sent them).
    at = next(i for i, m in enumerate(traj.messages) if m["role"] == "tool")
    assert traj.messages[at - 1]["tool_calls"][0]["function"]["name"] == tool
    assert traj.messages[at]["tool_call_id"] == traj.messages[at - 1]["tool_calls"][0]["id"]
    assert "did-it" in str(traj.messages[at]["content"])
    if adapter_cls is not OpenClawAdapter:  # the call comes back as the model made it: id and argument text
        first = calls[0].response
        assert first is not None
        made = first["choices"][0]["message"]["tool_calls"][0]
        sent_back = calls[1].request["messages"][at - 1]["tool_calls"][0]
        assert (sent_back["id"], sent_back["function"]["arguments"]) == (made["id"], made["function"]["arguments"])
    assert traj.messages[-1] == {"role": "assistant", "content": FINAL}
    assert traj.final_answer == FINAL and traj.stop_reason == "final"
    assert harness["dialect"] == adapter.dialect and harness["exit_code"] == 0
    assert harness["changes"]["written"] == {"made.txt": "seeded\nhi\n"}
    assert harness["changes"]["deleted"] == ["old.txt"]
    assert r.verdict is not None and r.verdict.passed


@pytest.mark.parametrize("adapter_cls", [c[0] for c in CASES], ids=[c[0].name for c in CASES])
def test_agent_list_shows_the_installed_version_and_dialect(adapter_cls: type[CLIAdapter]) -> None:
    adapter = adapter_cls()
    require_cli(adapter)
    row = describe(adapter.name)
    assert row["installed"] is True and row["missing"] == []
    assert row["version"] == row["installed_version"] == adapter.version
    assert row["dialect"] in ("Chat Completions", "Gemini generateContent")
    node = bundled_node()
    assert node is not None and adapter.command(_ctx_for(adapter.locate()))[0] == str(node)




async def test_without_the_node24_runtime_the_rollout_is_failed_agent_and_agent_list_says_why(
        files_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_jail()
    script = tmp_path / "node24/node_modules/@qwen-code/qwen-code/cli-entry.js"  # the CLI without its Node
    script.parent.mkdir(parents=True)
    script.write_text("console.log('never run')\n")
    script.chmod(0o755)
    (tmp_path / "node24/node_modules/.bin").mkdir()
    (tmp_path / "node24/node_modules/.bin/qwen").symlink_to(script)
    monkeypatch.setenv("PALAESTRA_AGENTS_DIR", str(tmp_path))
    adapter = QwenCodeAdapter()
    assert adapter.locate() == str(tmp_path / "node24/node_modules/.bin/qwen") and bundled_node() is None
    assert adapter.available() is False and describe("qwen-code")["installed"] is False
    backend = CountingScripted("replay", replay=[{"content": "unused"}])
    r = await run_rollout(FILES_TASK, env=files_env, agent=ExternalCLIAgent(adapter), proxy=ModelProxy(backend),
                          model_name="scripted", deadline_s=60)
    assert r.outcome.status == "failed" and r.outcome.kind == "agent", r.outcome
    assert "Node 24" in (r.outcome.message or "") and "node24" in (r.outcome.message or "")
    assert backend.served == 0
    # An executable given directly (a wrapper, a native build) is run as it is, not under node.
    assert adapter.program(_ctx_for("/bin/true")) == ["/bin/true"]


def _ctx_for(executable: str) -> LaunchContext:
    return LaunchContext(workdir=Path("."), home=Path("."), base_url="http://127.0.0.1:1", prompt="p",
                         model="m", max_steps=4, executable=executable)
