"""Terminal-Bench 1 task directories (task.yaml, run-tests.sh, tests/, solution.sh or solution.yaml) are
converted to Harbor task directories and run by ``terminal``: the oracle solves them (reward 1), the null
agent does not (0), and a grader that cannot run (no pytest) is failed(environment), never 0."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from palaestra.adapters.terminal_bench import MARKER, PYTEST_DIR, import_terminal_bench
from palaestra.core.errors import InvalidTask
from palaestra.core.grading import GradingFailure
from palaestra.core.records import Task, Trajectory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tb1"
CLI = [sys.executable, "-m", "palaestra.cli.main"]


def test_a_tb1_dataset_becomes_terminal_rows(tmp_path: Path) -> None:
    result = import_terminal_bench(FIXTURES, tmp_path / "tasks", env="terminal")
    assert [t.id for t in result.tasks] == ["tb1-fix-add", "tb1-hello-file"] and not result.skipped
    fix, hello = result.tasks
    assert hello.input == 'Create a file called hello.txt in the current directory. Write "Hello, world!" to it.'
    harbor = hello.metadata["harbor"]
    assert harbor["agent_timeout_s"] == 120.0 and harbor["verifier_timeout_s"] == 60.0
    assert hello.metadata["workdir"] == "/app" and hello.tags == ["terminal-bench", "easy", "file-operations"]
    assert hello.metadata["terminal_bench"]["source"] == str(FIXTURES / "hello-file")
    assert "approximate" not in hello.metadata  # FROM and WORKDIR only: nothing left unapplied
    assert fix.metadata["approximate"]["steps"] == ["RUN apt-get update && apt-get install -y tmux asciinema"]
    converted = Path(fix.metadata["task_dir"])
    assert (converted / MARKER).is_file() and (converted / "environment" / "calc.py").is_file()
    assert (converted / "tests" / "run-tests.sh").is_file() and (converted / "tests" / PYTEST_DIR / "pytest").is_dir()
    # solution.yaml's command lines become the reference script
    assert "sed -i 's/a - b/a + b/' /app/calc.py" in (converted / "solution" / "solve.sh").read_text()
    warnings = "\n".join(result.warnings)
    assert "tb1-fix-add: run_tests_in_same_shell" in warnings and "RUN apt-get update" in warnings
    # importing again replaces its own conversions, and refuses to overwrite anything else
    again = import_terminal_bench(FIXTURES, tmp_path / "tasks")
    assert [t.id for t in again.tasks] == ["tb1-fix-add", "tb1-hello-file"]
    (tmp_path / "other" / "hello-file").mkdir(parents=True)
    refused = import_terminal_bench(FIXTURES, tmp_path / "other")
    assert [t.id for t in refused.tasks] == ["tb1-fix-add"] and "not a conversion" in refused.skipped[0]


def test_keystroke_solutions_and_missing_grader_are_reported(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "fix-add", src / "keys")
    (src / "keys" / "solution.yaml").write_text("- command: C-x\n  block: false\n  append_enter: false\n")
    shutil.copytree(FIXTURES / "hello-file", src / "no-runner")
    (src / "no-runner" / "run-tests.sh").unlink()
    result = import_terminal_bench(src, tmp_path / "tasks")
    assert [t.id for t in result.tasks] == ["tb1-keys"]
    assert any("keystrokes ('C-x')" in w for w in result.warnings), result.warnings
    assert not (Path(result.tasks[0].metadata["task_dir"]) / "solution").exists()
    assert len(result.skipped) == 1 and "run-tests.sh" in result.skipped[0]
    with pytest.raises(InvalidTask, match="no Terminal-Bench tasks"):
        import_terminal_bench(tmp_path / "tasks" / "keys" / "tests", tmp_path / "more")


async def _play(task: Task, solve: bool) -> float:
    from palaestra.envs.terminal.env import Terminal

    env = Terminal()
    state = await env.seed(task)
    try:
        reference = env.reference(task)
        assert reference is not None
        for call in reference.tool_calls if solve else []:
            await env.call_tool(state, call.name, call.arguments)
        verdict = await env.verify(state, Trajectory())
    finally:
        await env.close(state)
    assert ("approximate" in verdict.metadata) == ("approximate" in task.metadata), verdict.metadata
    return verdict.reward


@pytest.mark.parametrize("name", ["hello-file", "fix-add"])
async def test_oracle_scores_1_and_null_0(tmp_path: Path, name: str) -> None:
    [task] = import_terminal_bench(FIXTURES / name, tmp_path / "tasks").tasks
    task = Task.model_validate(json.loads(task.model_dump_json()))  # as read back from the JSONL file
    assert await _play(task, solve=True) == 1.0
    assert await _play(task, solve=False) == 0.0


def _sandbox_python_has_pytest() -> bool:
    """Whether the sandbox's own python3 (without the bundled copy) can import pytest."""
    import asyncio

    from palaestra.sandbox import SandboxSpec, get_provider

    async def probe() -> int:
        async with await get_provider().create(SandboxSpec()) as box:
            return (await box.exec(["python3", "-c", "import pytest"], timeout=60)).exit_code

    return asyncio.run(probe()) == 0


def test_without_a_pytest_the_grader_fails_typed(tmp_path: Path) -> None:
    """Nothing bundled: where the sandbox's python3 has no pytest the oracle's rollout is
    failed(environment) (runner_missing), not 0; where it has one, the oracle scores 1."""
    import asyncio

    [task] = import_terminal_bench(FIXTURES / "hello-file", tmp_path / "tasks", with_pytest=False).tasks
    assert not (Path(task.metadata["task_dir"]) / "tests" / PYTEST_DIR).exists()
    if _sandbox_python_has_pytest():
        assert asyncio.run(_play(task, solve=True)) == 1.0
        return
    with pytest.raises(GradingFailure) as failure:
        asyncio.run(_play(task, solve=True))
    assert failure.value.kind == "environment" and failure.value.reason == "runner_missing", str(failure.value)


def test_broken_bundled_pytest_is_a_failure_not_0(tmp_path: Path) -> None:
    """A test runner that crashes before running a test (here: pluggy missing from the bundle) is
    failed(environment), not a wrong answer."""
    import asyncio

    [task] = import_terminal_bench(FIXTURES / "hello-file", tmp_path / "tasks").tasks
    shutil.rmtree(Path(task.metadata["task_dir"]) / "tests" / PYTEST_DIR / "pluggy")
    with pytest.raises(GradingFailure) as failure:
        asyncio.run(_play(task, solve=True))
    assert failure.value.kind == "environment", str(failure.value)


def _eval(rows: Path, model: str, out: Path) -> list[dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if k != "PALAESTRA_TOKEN"}
    proc = subprocess.run(CLI + ["eval", "run", "-i", str(rows), "--model", model, "--max-attempts", "1",
                                 "--out", str(out), "-q"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [orjson.loads(line) for line in (out / "rollouts.jsonl").read_bytes().splitlines() if line.strip()]


def test_env_import_then_eval_run_end_to_end(tmp_path: Path) -> None:
    """`env import harbor` given TB1 tasks converts them; `eval run` scores the oracle 1 and null 0."""
    rows = tmp_path / "rows.jsonl"
    proc = subprocess.run(CLI + ["env", "import", "harbor", str(FIXTURES), "--out", str(rows), "--env", "terminal"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "rows.jsonl.tasks" / "hello-file" / MARKER).is_file()
    for model, expected in (("scripted:oracle", 1.0), ("scripted:null", 0.0)):
        records = _eval(rows, model, tmp_path / model.split(":")[1])
        assert sorted(str(r["task_id"]) for r in records) == ["tb1-fix-add", "tb1-hello-file"]
        for record in records:
            assert record["outcome"]["status"] == "scored", record["outcome"]  # type: ignore[index]
            assert record["verdict"]["reward"] == expected, record["verdict"]  # type: ignore[index]
