"""Harbor's Terminus-2 (PyPI ``harbor``, Python 3.12 venv), for real, jailed, against the scripted model over
Chat Completions, on one terminal task graded in the environment's own sandbox. Terminus-2 answers in its own
JSON (analysis, plan, keystrokes for tmux, ``task_complete``) and asks for a second ``task_complete`` to
confirm, so the scripted task is exactly two model calls: the keystrokes, then the confirmation. Asserted: a
passed verdict, every call the model served in the trajectory, the command typed into tmux ran (its output is
in the pane Terminus-2 sent back), and its change (chmod) handed to the environment."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from palaestra.agents.catalog import describe
from palaestra.agents.external import ExternalCLIAgent
from palaestra.agents.external.adapter import CLIAdapter
from palaestra.agents.external.openhands import OpenHandsAdapter
from palaestra.agents.external.terminus import Terminus2Adapter
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

from .conftest import FILES_TASK, CountingScripted, require_cli, run_terminal_task

COMMAND = "chmod +x tools/run.sh && ./tools/run.sh\n"


def answer(analysis: str, keystrokes: list[str], complete: bool) -> dict[str, Any]:
    """One Terminus-2 answer in its JSON format (templates/terminus-json-plain.txt)."""
    body = {
        "analysis": analysis,
        "plan": "Make the script executable, run it, then finish.",
        "commands": [{"keystrokes": k, "duration": 0.5} for k in keystrokes],
        "task_complete": complete,
    }
    return {"content": json.dumps(body)}


async def test_terminus_2_solves_a_terminal_task_and_every_model_call_is_recorded(terminal: Any) -> None:
    adapter = Terminus2Adapter()
    require_cli(adapter)
    replay = [
        answer("tools/run.sh is not executable yet.", [COMMAND], True),
        answer("run.sh is executable now and printed ok.", [], True),
    ]
    r = await run_terminal_task(adapter, terminal, replay)
    traj = r.trajectory
    harness = traj.model_extra["harness"]
    first = str(traj.model_calls[0].request["messages"])
    assert "Format your response as JSON" in first and "tools/run.sh" in first  # Terminus-2's own prompt
    pane = traj.model_calls[-1].request["messages"][-1]["content"]  # what Terminus-2 read back from tmux
    assert "ok" in [line.strip() for line in str(pane).splitlines()], pane  # ./tools/run.sh ran in the jail
    assert traj.final_answer is not None and "printed ok" in traj.final_answer
    assert harness["dialect"] == "chat" and harness["exit_code"] == 0, harness["stderr_tail"]
    assert harness["changes"]["chmod"] == {"tools/run.sh": True}
    assert r.verdict is not None and r.verdict.passed


def test_agent_list_shows_terminus_2_with_its_version_and_dialect() -> None:
    adapter = Terminus2Adapter()
    require_cli(adapter)
    row = describe("terminus-2")
    assert row["installed"] is True and row["missing"] == []
    assert row["version"] == row["installed_version"] == adapter.version == "0.26.0"
    assert row["dialect"] == "Chat Completions" and "tmux" in row["needs"]["binaries"]


async def test_without_tmux_the_rollout_is_failed_agent_before_any_model_call(
    files_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = Terminus2Adapter()
    require_cli(adapter)
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda cmd, *a, **kw: None if cmd == "tmux" else which(cmd, *a, **kw))
    assert adapter.available() is False and describe("terminus-2")["installed"] is False
    backend = CountingScripted("replay", replay=[{"content": "unused"}])
    r = await run_rollout(
        FILES_TASK,
        env=files_env,
        agent=ExternalCLIAgent(adapter),
        proxy=ModelProxy(backend),
        model_name="scripted",
        deadline_s=60,
    )
    assert r.outcome.status == "failed" and r.outcome.kind == "agent", r.outcome
    assert "tmux" in (r.outcome.message or "") and backend.served == 0


@pytest.mark.parametrize(("adapter_cls", "word"), [(Terminus2Adapter, "harbor"), (OpenHandsAdapter, "openhands")])
def test_a_python_on_path_is_not_taken_for_a_venv_harness(
    adapter_cls: type[CLIAdapter], word: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PALAESTRA_AGENTS_DIR", str(tmp_path))  # no harness venv there
    assert shutil.which("python") or shutil.which("python3")  # what the generic lookup would fall back to
    adapter = adapter_cls()
    assert adapter.available() is False
    row = describe(adapter.name)
    assert row["installed"] is False and word in str(row["missing"])
