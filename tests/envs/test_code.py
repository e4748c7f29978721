"""``code``: answers are graded by hidden tests in a fresh sandbox; hacks and crashes earn nothing, and a
sandbox failure is an infrastructure failure, never a 0."""

from __future__ import annotations

import shutil
import sys
import warnings
from typing import Any

import pytest

from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.errors import InfraError
from palaestra.core.records import Rollout, Task, Trajectory
from palaestra.envs.code.env import CodeEnv
from palaestra.envs.code.harness import extract_code, parse_results
from palaestra.models.scripted import ScriptedBackend
from palaestra.placement import mount_env
from palaestra.rollout.runner import run_rollout
from palaestra.sandbox import Sandbox, SandboxError, SandboxProvider, SandboxSpec, landlock
from palaestra.sandbox.local import LocalProvider
from palaestra.sandbox.process import ProcessProvider, ProcessSandbox
from palaestra.server.model_proxy import ModelProxy


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


async def test_sandbox_failure_is_infrastructure_not_zero() -> None:
    class Broken(SandboxProvider):
        name = "broken"
        python = "python3"

        @classmethod
        def availability(cls) -> tuple[bool, str]:
            return True, "a provider that never starts"

        async def create(self, spec: SandboxSpec | None = None) -> Sandbox:
            raise SandboxError("no sandbox today", hint="fix the machine")

        def cleanup(self, *, include_live: bool = False) -> int:
            return 0

    env = CodeEnv(sandbox=Broken())
    state = env.seed(make_task())
    with pytest.raises(InfraError) as info:
        await env.verify(state, Trajectory(final_answer="def add(a, b):\n    return a + b\n"))
    assert info.value.failure == "sandbox"


# ---- a sandbox that cannot run an ordinary program: failed(sandbox), through the real runner --------

class _NoInterpreter(ProcessProvider):
    """A provider configured with an interpreter that does not exist (exit 127)."""

    @property
    def python(self) -> str:
        return "/nonexistent/bin/python3"


class _NoDevNullBox(ProcessSandbox):
    """The bug this guards against: Landlock granting /dev/null for reading only."""

    def _hardening(self) -> tuple[Any, ...]:
        ruleset = landlock.Ruleset(read=["/usr", "/etc", "/bin", "/lib", "/lib64", sys.base_prefix, sys.prefix,
                                         "/dev/null", "/dev/urandom"],
                                   write=[self.work_dir, self.tmp_dir], deny_tcp=True)
        self._ruleset = ruleset
        return (ruleset.apply,)


class _NoDevNull(ProcessProvider):
    box_class = _NoDevNullBox


class _MissingBwrap(LocalProvider):
    """bubblewrap configured at a path where there is none: the sandbox cannot even be entered."""

    def __init__(self) -> None:
        super().__init__()
        self.bwrap = "/nonexistent/bin/bwrap"


async def _oracle_rollout(env: CodeEnv, task: Task) -> Rollout:
    mounted = await mount_env(env, "inprocess")
    try:
        return await run_rollout(task, env=mounted.client, agent=ToolAgent(),
                                 proxy=ModelProxy(ScriptedBackend("oracle")), model_name="scripted:oracle",
                                 with_reference=True, deadline_s=120)
    finally:
        await mounted.stop()


@pytest.mark.parametrize("broken", ["no-interpreter", "no-dev-null", "missing-bwrap"])
async def test_harness_that_cannot_run_is_failed_sandbox_not_zero(broken: str) -> None:
    """The reference solution, graded in a sandbox that cannot run an ordinary program, is neither
    scored 0 nor scored at all: the rollout is failed(sandbox), with the reason and stderr's tail."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the process provider warns by design
        if broken == "no-interpreter":
            provider: SandboxProvider = _NoInterpreter(reap=False)
            expect = "missing"
        elif broken == "no-dev-null":
            if not landlock.abi_version():
                pytest.skip("process: this kernel has no Landlock, so nothing can deny /dev/null")
            provider = _NoDevNull(reap=False)
            expect = "/dev/null"
        else:
            if not shutil.which("bwrap"):
                pytest.skip("local: bwrap is not installed")
            provider = _MissingBwrap()
            expect = "bwrap"
    rollout = await _oracle_rollout(CodeEnv(sandbox=provider), make_task())
    assert rollout.outcome.status == "failed", rollout.outcome
    assert rollout.outcome.kind == "sandbox", rollout.outcome
    assert rollout.verdict is None, rollout.verdict
    assert expect in str(rollout.outcome.message), rollout.outcome.message


async def test_same_reference_is_scored_in_a_working_sandbox() -> None:
    """The control for the test above: the same rollout in a working ``process`` sandbox is scored 1."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        provider = ProcessProvider(reap=False)
    rollout = await _oracle_rollout(CodeEnv(sandbox=provider), make_task())
    assert rollout.outcome.status == "scored", rollout.outcome
    assert rollout.verdict is not None and rollout.verdict.reward == 1.0


def test_a_harness_without_its_start_line_is_not_a_grade() -> None:
    report = parse_results('["n", "pass", 0, ""]\n', "n", 1)
    assert not report.started
    assert parse_results('["n", "started", -1, ""]\n', "n", 1).started


def test_tasks_are_well_formed() -> None:
    env = CodeEnv()
    tasks = env.examples()
    assert len(tasks) >= 20
    for task in tasks:
        env.check_task(task)
        assert env.reference(task) is not None
