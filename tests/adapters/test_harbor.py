"""Harbor task directories become rows of the ``terminal`` environment: the fields task.toml carries,
the warnings for what cannot carry over, and an imported task solved and graded by ``terminal`` itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from palaestra.adapters.harbor import HARBOR_ENV, import_harbor
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task, Trajectory

TOML = """\
version = "1.0"

[task]
name = "acme/make-greeting"
keywords = ["files"]

[metadata]
difficulty = "easy"
category = "file-ops"
tags = ["trivial"]

[verifier]
timeout_sec = 45.0

[agent]
timeout_sec = 300.0

[environment]
memory = "1G"
storage_mb = 512
cpus = 1
"""


def make_harbor_task(root: Path, name: str, *, toml: str = TOML, test: str | None = None,
                dockerfile: str = "FROM alpine:3.20\nWORKDIR /app\nCOPY greeting.txt /app/\n") -> Path:
    path = root / name
    (path / "environment").mkdir(parents=True)
    (path / "tests").mkdir()
    (path / "solution").mkdir()
    (path / "instruction.md").write_text("Write 'hello' into out.txt next to greeting.txt.\n")
    (path / "task.toml").write_text(toml)
    (path / "environment" / "Dockerfile").write_text(dockerfile)
    (path / "environment" / "greeting.txt").write_text("hi\n")
    (path / "tests" / "test.sh").write_text(test or '#!/bin/sh\n[ "$(cat out.txt)" = hello ] && [ -f greeting.txt ]\n')
    (path / "solution" / "solve.sh").write_text("printf hello > out.txt\n")
    return path


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python3.11: task.toml is read with tomllib")
def test_a_dataset_becomes_terminal_rows(tmp_path: Path) -> None:
    make_harbor_task(tmp_path, "make-greeting")
    other = make_harbor_task(tmp_path, "needs-build", toml='[task]\nname = "acme/needs-build"\n',
                        dockerfile="FROM python:3.12-slim\nRUN pip install numpy\nWORKDIR /srv\n",
                        test="#!/bin/bash\npytest /tests/test_x.py && echo 1 > /logs/verifier/reward.txt\n")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "instruction.md").write_text("no tests here")
    result = import_harbor(tmp_path)

    assert [t.id for t in result.tasks] == ["harbor-acme-make-greeting", "harbor-acme-needs-build"]
    task = result.tasks[0]
    assert task.env == HARBOR_ENV and task.input == "Write 'hello' into out.txt next to greeting.txt."
    md = task.metadata
    assert md["task_dir"] == str((tmp_path / "make-greeting").resolve())
    assert md["workdir"] == "/app" and md["memory_mb"] == 1024 and md["disk_mb"] == 512 and "image" not in md
    assert md["harbor"]["verifier_timeout_s"] == 45.0 and md["harbor"]["agent_timeout_s"] == 300.0
    assert md["harbor"]["dockerfile_from"] == "alpine:3.20" and md["harbor"]["cpus"] == 1
    assert task.tags == ["harbor", "easy", "file-ops", "trivial", "files"]

    warnings = "\n".join(result.warnings)
    assert not any(w.startswith("harbor-acme-make-greeting") for w in result.warnings), warnings
    assert not warnings  # the harbor environment builds the image: its RUN steps run
    # rows for the terminal environment run no Dockerfile step: each one is named
    terminal = "\n".join(import_harbor(tmp_path, env="terminal").warnings)
    assert "harbor-acme-needs-build: environment/Dockerfile builds on python:3.12-slim" in terminal
    assert "RUN pip install numpy" in terminal
    assert "/logs/verifier" not in warnings  # the terminal env maps Harbor's fixed paths itself
    assert result.tasks[1].metadata["workdir"] == "/srv"
    assert len(result.skipped) == 1 and "broken" in result.skipped[0] and "tests/test.sh" in result.skipped[0]
    assert other.is_dir()


async def test_an_imported_task_is_solved_and_graded_by_terminal(tmp_path: Path) -> None:
    from palaestra.envs.terminal.env import Terminal

    make_harbor_task(tmp_path, "make-greeting")
    [task] = import_harbor(tmp_path / "make-greeting").tasks
    task = Task.model_validate(json.loads(task.model_dump_json()))  # as read back from the JSONL file
    env = Terminal()
    reference = env.reference(task)
    assert reference is not None and reference.tool_calls[0].name == "run"  # solution/solve.sh
    for calls, expected in ((reference.tool_calls, 1.0), ([], 0.0)):
        state = await env.seed(task)
        try:
            for call in calls:
                await env.call_tool(state, call.name, call.arguments)
            verdict = await env.verify(state, Trajectory())
        finally:
            await env.close(state)
        assert verdict.reward == expected, verdict.metadata


def test_not_a_dataset_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidTask, match="no Harbor tasks"):
        import_harbor(tmp_path)


@pytest.mark.parametrize(("solve", "expected"), [(True, 1.0), (False, 0.0)])
async def test_harbor_reward_file_and_tests_path_are_honoured(tmp_path: Path, solve: bool, expected: float) -> None:
    """A Harbor test that always exits 0 and writes its reward to /logs/verifier, reading /tests/: graded right."""
    from palaestra.envs.terminal.env import Terminal

    test = ('#!/bin/bash\nmkdir -p /logs/verifier\n'
            'if [ "$(cat out.txt 2>/dev/null)" = "$(cat /tests/expected.txt)" ]; '
            'then echo 1 > /logs/verifier/reward.txt; '
            'else echo 0 > /logs/verifier/reward.txt; fi\nexit 0\n')
    make_harbor_task(tmp_path, "make-greeting", test=test)
    (tmp_path / "make-greeting" / "tests" / "expected.txt").write_text("hello")
    [task] = import_harbor(tmp_path / "make-greeting").tasks
    env = Terminal()
    state = await env.seed(task)
    try:
        if solve:
            await env.call_tool(state, "run", {"cmd": "printf hello > out.txt"})
        verdict = await env.verify(state, Trajectory())
    finally:
        await env.close(state)
    assert verdict.reward == expected, verdict.metadata
