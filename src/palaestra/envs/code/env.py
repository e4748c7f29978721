"""``code``: write a Python function; hidden unit tests decide.

The answer's program and the task's tests run in a *fresh* sandbox per verification (bubblewrap by
default), so nothing the model did before — in its own scratch sandbox through the optional
``run_python`` tool — can touch the grading. Reward is the fraction of tests passed, or all-or-nothing
(``metadata.scoring = "all"``, or the environment's ``scoring``). A sandbox that fails is an
infrastructure failure (``failed(sandbox)``), never a 0.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.core.tools import tool
from palaestra.envs.code.harness import HARNESS, extract_code, parse_results
from palaestra.sandbox import ExecResult, Sandbox, SandboxError, SandboxProvider, SandboxSpec
from palaestra.sandbox.envsupport import labels_for, provider_for, python_for

SYSTEM = (
    "You write Python. Implement exactly the function the user asks for, with that name and signature; "
    "standard library only. You may try code with the run_python tool. Reply with the complete code in a "
    "single ```python block."
)


@dataclass
class CodeState:
    task: Task
    scratch: Sandbox | None = None


class CodeEnv(Environment):
    """Python functions checked by hidden unit tests in a fresh sandbox."""

    name = "code"
    version = "0.1"
    description = "Write a Python function; hidden unit tests run in a fresh sandbox (fraction or all-pass)."
    domain = "coding"
    mechanism = "single-turn"
    system_prompt = SYSTEM
    scoring: str = "fraction"

    def __init__(self, sandbox: str | SandboxProvider | None = None, *, scoring: str | None = None,
                 run_id: str | None = None) -> None:
        """``sandbox``: the provider (a name or an instance) for tasks that name none in
        ``metadata.sandbox``; ``None`` keeps the machine's default. ``scoring``: ``fraction`` (default)
        or ``all`` for tasks that say nothing. ``run_id`` labels the sandboxes this run creates."""
        self.sandbox = sandbox
        self.scoring = scoring or type(self).scoring
        self.run_id = run_id

    def check_task(self, task: Task) -> None:
        md = task.metadata
        if not isinstance(md.get("entry_point"), str) or not md["entry_point"].isidentifier():
            raise InvalidTask(f"code task '{task.id}' needs metadata.entry_point (the function's name)",
                              hint='e.g. "entry_point": "rle_encode"')
        tests = md.get("tests")
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
            raise InvalidTask(f"code task '{task.id}' needs metadata.tests: a non-empty list of Python statements",
                              hint='e.g. "tests": ["assert add(1, 2) == 3"]')
        if md.get("scoring", self.scoring) not in ("fraction", "all"):
            raise InvalidTask(f"code task '{task.id}': metadata.scoring must be 'fraction' or 'all'")

    def seed(self, task: Task) -> CodeState:
        self.check_task(task)
        return CodeState(task)

    async def close(self, state: CodeState) -> None:
        if state.scratch is not None:
            box, state.scratch = state.scratch, None
            await box.close()

    @tool
    async def run_python(self, state: CodeState, code: str, timeout_s: float = 10.0) -> str:
        """Run a Python program in a scratch sandbox (no network) and see its output.

        Args:
            code: the whole program; it is saved as main.py and run with python.
            timeout_s: seconds before the program is killed (at most 60).
        """
        provider = provider_for(state.task, self.sandbox)
        if state.scratch is None:
            state.scratch = await provider.create(self._spec(state.task, {}, "scratch"))
        await state.scratch.upload("main.py", code)
        result = await state.scratch.exec([python_for(provider), "main.py"], timeout=max(0.1, min(timeout_s, 60.0)))
        return result.summary()

    def _spec(self, task: Task, files: dict[str, str], role: str) -> SandboxSpec:
        md = task.metadata
        return SandboxSpec(image=md.get("image"), files=files, memory_mb=int(md.get("memory_mb", 512)),
                           pids=64, disk_mb=64, labels=labels_for(self.name, task, run_id=self.run_id, role=role))

    async def verify(self, state: CodeState, trajectory: Trajectory) -> Verdict:
        task = state.task
        md = task.metadata
        entry = md["entry_point"]
        tests: list[str] = md["tests"]
        scoring = md.get("scoring", self.scoring)
        code = extract_code(trajectory.final_text(), entry)
        if not code.strip():
            return Verdict(reward=0.0, passed=False, components={"tests_passed": 0.0},
                           metadata={"reason": "no_code", "tests": len(tests)})
        nonce = os.urandom(16).hex()
        timeout = float(md.get("timeout_s", 10.0))
        spec_json = {"entry_point": entry, "tests": tests, "setup": md.get("setup", ""),
                     "load_timeout": timeout, "test_timeout": float(md.get("test_timeout_s", timeout))}
        files = {"solution.py": code, "_harness.py": HARNESS, "_tests.json": json.dumps(spec_json)}
        provider = provider_for(task, self.sandbox)
        python = python_for(provider)
        async with await provider.create(self._spec(task, files, "grade")) as box:
            result = await box.exec([python, "-I", "-S", "_harness.py"], stdin=(nonce + "\n").encode(),
                                    timeout=timeout + 5)
        report = parse_results(result.stdout, nonce, len(tests))
        if not report.started:
            raise _harness_failure(provider.name, python, result)
        passed = len(report.passed) == len(tests)
        reward = report.fraction if scoring == "fraction" else float(passed)
        metadata: dict[str, Any] = {"tests": len(tests), "passed_tests": len(report.passed), "scoring": scoring,
                                    "sandbox": provider.name}  # which provider graded: --sandbox, or the default
        if report.load_error:
            metadata["load_error"] = report.load_error
        if report.failures:
            metadata["failures"] = {str(i): msg for i, msg in sorted(report.failures.items())[:5]}
        if result.failure:
            metadata["sandbox_failure"] = f"{result.failure}: {result.detail}"
        if result.stderr.strip() and not passed:
            metadata["stderr"] = result.stderr[-1000:]
        return Verdict(reward=reward, passed=passed, components={"tests_passed": report.fraction},
                       metadata=metadata, answer=code)

    def reference(self, task: Task) -> Reference | None:
        solution = task.metadata.get("solution")
        if not isinstance(solution, str):
            return None
        return Reference(final_answer=f"```python\n{solution.rstrip()}\n```")


def _harness_failure(provider: str, python: str, result: ExecResult) -> SandboxError:
    """The harness never reached the candidate's code, so nothing about the answer is known: the
    sandbox could not run an ordinary program (a missing interpreter, a denied ``/dev/null``, too
    little memory to start Python). A grade of 0 here would blame the answer for the machine."""
    if result.exit_code in (126, 127) and not result.failure:
        why = f"the interpreter {python!r} is {'missing' if result.exit_code == 127 else 'not executable'} there"
    elif result.failure:
        why = f"the sandbox stopped it ({result.failure}: {result.detail})"
    else:
        why = "it crashed before loading the solution"
    tail = (result.stderr.strip() or result.stdout.strip())[-1500:]
    return SandboxError(
        f"the code harness could not run in the '{provider}' sandbox (exit {result.exit_code}): {why}; "
        f"the answer was not graded. stderr tail: {tail or '(empty)'}",
        hint=f"check that the '{provider}' sandbox runs ordinary programs: `palaestra env check code`, "
             "`palaestra sandbox info`")
