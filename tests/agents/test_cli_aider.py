"""Aider, for real, jailed, against the scripted model over Chat Completions (litellm). Aider edits by
writing files out in its edit format (``whole``), which it applies itself: the scripted answer is such an
edit, and the verifier sees the file only once the workspace was handed back to the environment."""

from __future__ import annotations

from typing import Any

from palaestra.agents.external import AiderAdapter
from palaestra.core.records import Task

from .conftest import CountingScripted, require_cli, run_cli

TASK = Task(
    id="aider-files", env="files", input="Create made.txt holding the text of notes.txt followed by a line 'hi'.",
    metadata={"files": {"notes.txt": "seeded\n"}, "expect": {"made.txt": "seeded\nhi\n", "notes.txt": "seeded\n"}},
)
EDIT = "I will create made.txt.\n\nmade.txt\n```\nseeded\nhi\n```\n"


async def test_aider_applies_the_models_edit_and_hands_the_file_back(files_env: Any) -> None:
    adapter = AiderAdapter()
    require_cli(adapter)
    backend = CountingScripted("replay", replay=[{"content": EDIT}])
    r = await run_cli(adapter, files_env, [], task=TASK, backend=backend)
    assert r.outcome.status == "scored", r.outcome.message
    traj = r.trajectory
    assert backend.served == len(traj.model_calls) >= 1  # nothing aider sent escaped the record
    assert all(c.response is not None for c in traj.model_calls)
    request = traj.model_calls[0].request
    assert "seeded" in str(request["messages"])  # notes.txt was added to the chat: the model saw it
    assert "made.txt" in str(request["messages"][-1])  # the task itself, as aider's last user turn
    harness = traj.model_extra["harness"]
    assert harness["cli"] == "aider" and harness["exit_code"] == 0, harness["stderr_tail"]
    assert harness["changes"]["written"] == {"made.txt": "seeded\nhi\n"}
    assert r.verdict is not None and r.verdict.passed
