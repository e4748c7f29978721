"""The grading contract end to end: Harbor task directories written here, imported, and run by ``eval run``
(the real collector, runner and ``terminal`` environment in real sandboxes) with the ``scripted:oracle``
model, which plays each task's solution/solve.sh. Each way grading can fail comes back as failed(kind) with
no verdict and is counted apart from the scores; a right answer still scores 1 and a wrong one 0."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from palaestra.adapters.harbor import import_harbor, write_rows
from palaestra.core.environment import Environment
from palaestra.core.records import Task, Trajectory, Verdict
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal_read import read_journal

HERE = Path(__file__).resolve()
pytestmark = pytest.mark.skipif(sys.version_info < (3, 11), reason="python3.11: task.toml is read with tomllib")

TOML = '[task]\nname = "acme/{name}"\n\n[verifier]\ntimeout_sec = {timeout}\n{verifier}\n[agent]\ntimeout_sec = 60.0\n'
# Harbor's usual test.sh: run the checks, turn their exit status into /logs/verifier/reward.txt, exit 0
CHECK = '[ "$(cat out.txt 2>/dev/null)" = hello ]'
REWARD = ('if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; '
          'else echo 0 > /logs/verifier/reward.txt; fi\n')


def harbor_task(root: Path, name: str, test: str, *, solve: str = "printf hello > out.txt\n",
                timeout: float = 60.0, verifier: str = "") -> None:
    path = root / name
    for sub in ("environment", "tests", "solution"):
        (path / sub).mkdir(parents=True)
    (path / "instruction.md").write_text("Write 'hello' into /app/out.txt.\n")
    (path / "task.toml").write_text(TOML.format(name=name, timeout=timeout, verifier=verifier))
    (path / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    (path / "environment" / "README").write_text("the agent's starting files\n")
    (path / "tests" / "test.sh").write_text("#!/bin/bash\n" + test)
    (path / "solution" / "solve.sh").write_text(solve)


# name -> (test.sh after the shebang, solve.sh or None for the default, more [verifier] lines, its timeout)
SHAPES: dict[str, tuple[str, str | None, str, float]] = {
    "correct": (f"{CHECK}\n{REWARD}", None, "", 60.0),
    "wrong": (f"{CHECK}\n{REWARD}", "printf goodbye > out.txt\n", "", 60.0),
    "exit-code-only": (f"{CHECK}\n", "printf goodbye > out.txt\n", "", 60.0),  # no reward file meant: exit 1 = 0
    # the image has no pytest: exit 127 straight out of the script ...
    "pytest-exit-127": ("pytest /tests/test_outputs.py\n", None, "", 60.0),
    # ... or, as Harbor's test.sh usually does, a reward of 0 written from pytest's exit status 127
    "pytest-reward-0": (f"pytest /tests/test_outputs.py\n{REWARD}", None, "", 60.0),
    "reward-never-written": (f"{CHECK} && echo 1 > /logs/verifier/rewards.txt\nexit 0\n", None, "", 60.0),
    "reward-unparsable": ("echo PASSED > /logs/verifier/reward.txt\n", None, "", 60.0),
    "reward-json": ('echo \'{"reward": 1.0, "style": 0.5}\' > /logs/verifier/reward.json\n', None, "", 60.0),
    # the test fetches its runner first; without a network the fetch fails and the check never ran
    "network-at-test-time": ("echo 'curl: (6) Could not resolve host: astral.sh' >&2\n"
                             f"false\n{REWARD}", None, "", 60.0),
    # task.toml says the verifier needs the internet and the sandbox has none: failed before anything runs
    "network-declared": (f"{CHECK}\n{REWARD}", None, 'network_mode = "public"', 60.0),
    "verifier-timeout": ("echo 'waiting for a server' >&2\nsleep 60\n", None, "", 1.0),
}
EXPECTED: dict[str, tuple[str, str | float]] = {  # name -> ("scored", reward) | ("failed", kind)
    "correct": ("scored", 1.0), "wrong": ("scored", 0.0), "exit-code-only": ("scored", 0.0),
    "reward-json": ("scored", 1.0),
    "pytest-exit-127": ("failed", "environment"), "pytest-reward-0": ("failed", "environment"),
    "reward-never-written": ("failed", "verifier"), "reward-unparsable": ("failed", "verifier"),
    "network-at-test-time": ("failed", "environment"), "network-declared": ("failed", "environment"),
    "verifier-timeout": ("failed", "verifier"),
}
MESSAGES = {
    "pytest-exit-127": ["runner_missing", "'pytest'", "pytest: command not found"],
    "pytest-reward-0": ["runner_missing", "'pytest'"],
    "reward-never-written": ["reward_missing", "reward.txt or reward.json"],
    "reward-unparsable": ["reward_unparsable", "PASSED"],
    "network-at-test-time": ["network", "Could not resolve host"],
    "network-declared": ["network", "verifier phase", 'network_mode = "public"', "metadata.network"],
    "verifier-timeout": ["timeout", "after 1 s", "waiting for a server"],
}


def _dataset(root: Path) -> Path:
    for name, (test, solve, verifier, timeout) in SHAPES.items():
        harbor_task(root, name, test, solve=solve or "printf hello > out.txt\n", timeout=timeout, verifier=verifier)
    return root


async def test_every_failure_shape_is_typed_and_never_scored(tmp_path: Path) -> None:
    assert shutil.which("pytest", path="/usr/local/bin:/usr/bin:/bin") is None, \
        "this test needs a sandbox without pytest on its PATH"
    imported = import_harbor(_dataset(tmp_path / "dataset"), env="terminal")
    assert sorted(t.id.removeprefix("harbor-acme-") for t in imported.tasks) == sorted(SHAPES)
    assert any("harbor-acme-network-declared: task.toml declares the network is needed" in w
               for w in imported.warnings), imported.warnings
    rows = tmp_path / "tasks.jsonl"
    write_rows(rows, imported.tasks)

    result = await run_eval(RunConfig(input=str(rows), model="scripted:oracle", max_attempts=1, concurrency=4,
                                      out=str(tmp_path / "run")))
    records, problems = read_journal(tmp_path / "run" / "rollouts.jsonl")
    assert not problems
    by_name: dict[str, dict[str, Any]] = {r["task_id"].removeprefix("harbor-acme-"): r for r in records}
    assert sorted(by_name) == sorted(SHAPES)
    for name, (status, want) in EXPECTED.items():
        r = by_name[name]
        outcome = r["outcome"]
        assert outcome["status"] == status, (name, outcome, r.get("verdict"))
        if status == "scored":
            assert r["verdict"]["reward"] == want, (name, r["verdict"])
        else:
            assert outcome["kind"] == want and r["verdict"] is None, (name, outcome)
            for needle in MESSAGES[name]:
                assert needle in outcome["message"], (name, needle, outcome["message"])
    assert by_name["reward-json"]["verdict"]["components"]["style"] == 0.5
    # failed before the agent ran: no model call was spent on a task that cannot be graded here
    assert by_name["network-declared"]["trajectory"]["model_calls"] == []
    assert by_name["pytest-exit-127"]["trajectory"]["tool_calls"]  # the solution did run before grading

    overall = result.metrics["overall"]
    assert overall["n_failed"] == {"environment": 4, "verifier": 3}
    assert overall["n_rollouts_scored"] == 4 and overall["mean_reward"] == pytest.approx(0.5)  # 1, 0, 0, 1


class Boom(Environment):
    """A verifier with a bug: it raises instead of answering."""

    name = "boom"

    def verify(self, state: Task, trajectory: Trajectory) -> Verdict:
        raise KeyError("expected_answer")


async def test_a_verifier_exception_is_failed_verifier(tmp_path: Path) -> None:
    rows = tmp_path / "tasks.jsonl"
    rows.write_text('{"id": "b1", "input": "say hi"}\n')
    spec = f"{HERE}:Boom"
    for placement in ("direct", "inprocess"):  # the host itself, and over HTTP (the ASGI app)
        out = tmp_path / placement
        result = await run_eval(RunConfig(input=str(rows), env=spec, model="scripted:oracle", max_attempts=1,
                                          agent="single", placement=placement, out=str(out)))
        [record], _ = read_journal(out / "rollouts.jsonl")
        assert record["outcome"]["status"] == "failed" and record["outcome"]["kind"] == "verifier", record["outcome"]
        assert "KeyError" in record["outcome"]["message"] and "expected_answer" in record["outcome"]["message"]
        assert record["verdict"] is None and result.metrics["overall"]["n_failed"] == {"verifier": 1}
