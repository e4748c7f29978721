"""``code``: answers are graded by hidden tests in a fresh sandbox; hacks and crashes earn nothing, and a
sandbox failure is an infrastructure failure, never a 0."""

from __future__ import annotations

import pytest

from palaestra.core.errors import InfraError
from palaestra.core.records import Task, Trajectory
from palaestra.envs.code.env import CodeEnv
from palaestra.envs.code.harness import extract_code, parse_results
from palaestra.sandbox import SandboxError


def make_task(**md: object) -> Task:
    base: dict[str, object] = {
        "entry_point": "add",
        "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4", "assert add(0, 0) == 0"],
        "solution": "def add(a, b):\n    return a + b\n",
    }
    base.update(md)
    return Task(id="t-add", env="code", input="Write add(a, b).", metadata=base)


async def grade(env: CodeEnv, task: Task, answer: str) -> tuple[float, bool, dict[str, object]]:
    state = env.seed(task)
    try:
        v = await env.verify(state, Trajectory(final_answer=answer))
    finally:
        await env.close(state)
    return v.reward, bool(v.passed), v.metadata


def test_extract_code() -> None:
    text = "Here:\n```python\ndef helper():\n    pass\n```\nand\n```python\ndef add(a, b):\n    return a + b\n```\ndone"
    assert extract_code(text, "add").startswith("def add")
    assert extract_code("```\nx = 1\n```", "add") == "x = 1\n"
    assert extract_code("def add(a, b): return a + b", "add").startswith("def add")
    assert extract_code("I cannot do that.", "add") == ""


def test_only_nonce_lines_count() -> None:
    report = parse_results('["abc", "pass", 0, ""]\n["nonce", "pass", 1, ""]\nPASS\n', "nonce", 3)
    assert report.passed == [1] and set(report.failures) == {0, 2}


async def test_rewards_fraction_all_and_failures() -> None:
    env = CodeEnv()
    ok = await grade(env, make_task(), "```python\ndef add(a, b):\n    return a + b\n```")
    assert ok[:2] == (1.0, True)
    partial = await grade(env, make_task(), "```python\ndef add(a, b):\n    return a + b if a >= 0 else 99\n```")
    assert partial[0] == 0.75 and partial[1] is False and "1" in partial[2]["failures"]  # type: ignore[operator]
    strict = await grade(env, make_task(scoring="all"), "```python\ndef add(a, b):\n    return 3\n```")
    assert strict[0] == 0.0
    broken = await grade(env, make_task(), "```python\ndef add(a, b)\n    return a + b\n```")
    assert broken[0] == 0.0 and "SyntaxError" in str(broken[2]["load_error"])
    empty = await grade(env, make_task(), "")
    assert empty[0] == 0.0 and empty[2]["reason"] == "no_code"


async def test_hacks_and_runaways_earn_nothing() -> None:
    env = CodeEnv()
    task = make_task(timeout_s=1, test_timeout_s=0.3)
    hacks = [
        "import os\nos._exit(0)\ndef add(a, b):\n    return -7\n",
        "print('PASS')\nimport sys\nsys.stdout.write('[\"x\", \"pass\", 0, \"\"]\\n')\ndef add(a, b):\n    return -7\n",
        "import builtins\nbuiltins.AssertionError = Exception\ndef add(a, b):\n    return -7\n",
        "def add(a, b):\n    while True:\n        pass\n",
        "import os\nopen('/etc/pwned', 'w')\ndef add(a, b):\n    return -7\n",
    ]
    for code in hacks:
        reward, passed, meta = await grade(env, task, f"```python\n{code}```")
        assert reward == 0.0 and not passed, (code, meta)
        if "while True" in code:
            assert "timed out" in str(meta.get("failures")), meta


async def test_run_python_tool_and_cleanup() -> None:
    env = CodeEnv()
    state = env.seed(make_task())
    out = await env.run_python(state, "print(sum(range(10)))")
    assert "exit code 0" in out and "45" in out
    out = await env.run_python(state, "import time\ntime.sleep(5)", timeout_s=0.3)
    assert "timeout" in out
    box = state.scratch
    assert box is not None
    await env.close(state)
    assert (await box.status()).state == "closed"


async def test_sandbox_failure_is_infrastructure_not_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    from palaestra.sandbox import envsupport

    class Broken:
        python = "python3"

        async def create(self, spec: object) -> object:
            raise SandboxError("no sandbox today", hint="fix the machine")

    monkeypatch.setattr("palaestra.envs.code.env.provider_for", lambda task=None: Broken())
    assert envsupport.provider_for is not None
    env = CodeEnv()
    state = env.seed(make_task())
    with pytest.raises(InfraError) as info:
        await env.verify(state, Trajectory(final_answer="def add(a, b):\n    return a + b\n"))
    assert info.value.failure == "sandbox"


def test_tasks_are_well_formed() -> None:
    env = CodeEnv()
    tasks = env.examples()
    assert len(tasks) >= 20
    for task in tasks:
        env.check_task(task)
        assert env.reference(task) is not None
