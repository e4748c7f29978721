"""``terminal``: Harbor-style tasks solved with shell tools in a sandbox, graded in a *fresh* one.

The agent works in one sandbox per session (``run``, ``write_file``, ``read_file``), starting from the
task's ``workspace/``. Grading copies only the agent's working directory into a new sandbox, puts the
task's ``tests/`` beside it (never where the agent could have written them), and runs
``tests/test.sh``: exit 0 is a pass, or the script writes a reward in [0, 1] to
``$PALAESTRA_REWARD_FILE``. Whatever the agent changed outside its working directory, or did to the
tests it could read, is gone. A failing sandbox is ``failed(sandbox)``, never a 0.

Tasks: a row's ``metadata.task_dir`` names a task directory (relative: one bundled under
``data/tasks/``; absolute: your own, e.g. converted Harbor tasks). See ``taskdir.py`` for the layout.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.errors import InvalidTask, ToolError
from palaestra.core.records import Reference, Task, ToolCall, Trajectory, Verdict
from palaestra.core.tools import tool
from palaestra.envs.terminal.taskdir import TaskDir, load_task_dir
from palaestra.sandbox import ExecResult, Sandbox, SandboxSpec
from palaestra.sandbox.envsupport import labels_for, provider_for

SYSTEM = (
    "You are working in a Linux sandbox without network access. Your current directory holds the task's "
    "files. Use the tools: run(cmd) runs a shell command there, write_file and read_file handle files "
    "(paths relative to that directory). Finish the task, then reply with a short summary of what you did."
)
TESTS_DIR = "/tmp/palaestra-tests"
REWARD_FILE = "/tmp/palaestra-logs/reward.txt"
READ_LIMIT = 100_000
# bash where the sandbox has it (agents write bash), else POSIX sh
_SHELL = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; else exec sh -c "$1"; fi'
_SCRIPT = ('mkdir -p "${PALAESTRA_REWARD_FILE%/*}"; '
           'if command -v bash >/dev/null 2>&1; then exec bash "$1"; else exec sh "$1"; fi')


@dataclass
class TerminalState:
    task: Task
    taskdir: TaskDir
    box: Sandbox


class Terminal(Environment):
    """Shell tasks in a sandbox; the task's tests/test.sh decides, run in a fresh sandbox."""

    name = "terminal"
    version = "0.1"
    description = "Harbor-style shell tasks in a sandbox; tests/test.sh grades a fresh copy of the agent's files."
    domain = "terminal"
    mechanism = "multi-turn"
    system_prompt = SYSTEM
    workdir = "/app"

    def __init__(self) -> None:
        self._cache: dict[Path, TaskDir] = {}

    # ---- tasks -------------------------------------------------------------------------------------
    def examples(self) -> list[Task]:
        root = self.resolved_data_dir() / "tasks"
        tasks: list[Task] = []
        for path in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
            td = self._taskdir(path)
            tasks.append(Task(id=f"terminal-{path.name}", env=self.name, input=td.instruction,
                              metadata={"task_dir": path.name}, tags=["terminal"]))
        return tasks

    def _path(self, task: Task) -> Path:
        raw = task.metadata.get("task_dir")
        if not isinstance(raw, str) or not raw:
            raise InvalidTask(f"terminal task '{task.id}' has no metadata.task_dir",
                              hint="name a task directory (instruction.md, tests/test.sh, workspace/)")
        path = Path(raw)
        return path if path.is_absolute() else self.resolved_data_dir() / "tasks" / path

    def _taskdir(self, path: Path) -> TaskDir:
        if path not in self._cache:
            self._cache[path] = load_task_dir(path)
        return self._cache[path]

    def check_task(self, task: Task) -> None:
        self._taskdir(self._path(task))

    def prompt(self, task: Task) -> list[dict[str, Any]]:
        if not task.input:
            task = task.model_copy(update={"input": self._taskdir(self._path(task)).instruction})
        return super().prompt(task)

    def _spec(self, task: Task, td: TaskDir, role: str, files: dict[str, bytes]) -> SandboxSpec:
        md = task.metadata
        return SandboxSpec(image=md.get("image"), workdir=str(md.get("workdir") or self.workdir), files=files,
                           memory_mb=int(md.get("memory_mb", 1024)), pids=256, disk_mb=int(md.get("disk_mb", 256)),
                           labels=labels_for(self.name, task, role=role),
                           lifetime_s=td.agent_timeout_s + td.verifier_timeout_s + 600)

    # ---- session ----------------------------------------------------------------------------------
    async def seed(self, task: Task) -> TerminalState:
        td = self._taskdir(self._path(task))
        box = await provider_for(task).create(self._spec(task, td, "agent", {}))
        try:
            await _copy_in(box, td.workspace, td.modes, ".")
        except BaseException:
            await box.close()
            raise
        return TerminalState(task, td, box)

    async def close(self, state: TerminalState) -> None:
        await state.box.close()

    @tool
    async def run(self, state: TerminalState, cmd: str, timeout_s: float = 30.0) -> str:
        """Run a shell command (bash when available) in the working directory.

        Args:
            cmd: the command line.
            timeout_s: seconds before the command and everything it started are killed (at most 600).
        """
        result = await state.box.exec(["/bin/sh", "-c", _SHELL, "sh", cmd],
                                      timeout=max(0.1, min(timeout_s, 600.0)))
        return result.summary(limit=20_000)

    @tool
    async def write_file(self, state: TerminalState, path: str, content: str) -> str:
        """Create or overwrite a file (parent directories are created).

        Args:
            path: the file's path, relative to the working directory.
            content: the complete new content.
        """
        try:
            await state.box.upload(path, content)
        except ValueError as exc:
            raise ToolError(str(exc), hint="use a path inside the working directory") from None
        return f"wrote {len(content.encode())} bytes to {path}"

    @tool
    async def read_file(self, state: TerminalState, path: str) -> str:
        """Read a text file.

        Args:
            path: the file's path, relative to the working directory.
        """
        try:
            data = await state.box.download(path, max_bytes=16 << 20)
        except ValueError as exc:
            raise ToolError(str(exc), hint="check the path with run('ls')") from None
        text = data[:READ_LIMIT].decode("utf-8", errors="replace")
        return text + (f"\n[truncated: {len(data)} bytes in all]" if len(data) > READ_LIMIT else "")

    # ---- grading ----------------------------------------------------------------------------------
    async def verify(self, state: TerminalState, trajectory: Trajectory) -> Verdict:
        td = state.taskdir
        try:
            workspace = await state.box.download_tar(".", max_bytes=64 << 20, max_files=5000)
        except ValueError as exc:
            return Verdict(reward=0.0, passed=False, metadata={"reason": f"workspace not gradable: {exc}"})
        provider = provider_for(state.task)
        async with await provider.create(self._spec(state.task, td, "grade", {})) as fresh:
            await fresh.upload_tar(workspace, ".")
            tests = td.tests
            if state.task.metadata.get("harbor") is not None:  # imported Harbor task: its fixed paths
                tests = harbor_paths(tests, fresh.resolve(TESTS_DIR), fresh.resolve(REWARD_FILE))
            await _copy_in(fresh, tests, {k: 0o755 for k in tests}, TESTS_DIR)
            script = f"{fresh.resolve(TESTS_DIR)}/test.sh"
            result = await fresh.exec(
                ["/bin/sh", "-c", _SCRIPT, "sh", script], timeout=td.verifier_timeout_s,
                env={"TESTS_DIR": fresh.resolve(TESTS_DIR), "PALAESTRA_REWARD_FILE": fresh.resolve(REWARD_FILE)})
            reward_text = None
            with contextlib.suppress(ValueError):
                reward_text = (await fresh.download(REWARD_FILE, max_bytes=1000)).decode(errors="replace")
        return _verdict(result, reward_text)

    def reference(self, task: Task) -> Reference | None:
        ref = self._taskdir(self._path(task)).reference
        if not ref:
            return None
        calls = [ToolCall(name=c["name"], arguments=dict(c.get("arguments") or {})) for c in ref.get("tool_calls", [])]
        return Reference(tool_calls=calls, final_answer=ref.get("final_answer") or "Done.")


def harbor_paths(tests: dict[str, bytes], tests_dir: str, reward_file: str) -> dict[str, bytes]:
    """Harbor's tests live at ``/tests`` and write ``/logs/verifier/reward.txt``; a sandbox has neither
    (its root is read-only), so those paths in the test files point at this sandbox's own places."""
    reward_dir = reward_file.rsplit("/", 1)[0]
    out = {}
    for rel, data in tests.items():
        data = data.replace(b"/logs/verifier", reward_dir.encode())
        out[rel] = re.sub(rb"(?<![\w.$}])/tests/", tests_dir.rstrip("/").encode() + b"/", data)
    return out


async def _copy_in(box: Sandbox, files: dict[str, bytes], modes: dict[str, int], under: str) -> None:
    for rel, data in files.items():
        await box.upload(f"{under.rstrip('/')}/{rel}", data, mode=modes.get(rel, 0o644))


def _verdict(result: ExecResult, reward_text: str | None) -> Verdict:
    metadata: dict[str, Any] = {"exit_code": result.exit_code, "test_output": (result.stdout + result.stderr)[-2000:]}
    if result.failure:
        metadata["sandbox_failure"] = f"{result.failure}: {result.detail}"
    reward = 1.0 if result.ok else 0.0
    if reward_text is not None and reward_text.strip():
        try:
            reward = min(1.0, max(0.0, float(reward_text.strip().split()[0])))
            metadata["reward_file"] = reward_text.strip()[:100]
        except ValueError:
            metadata["reward_file_unreadable"] = reward_text.strip()[:100]
    return Verdict(reward=reward, passed=reward >= 1.0 and result.failure is None,
                   components={"tests": reward}, metadata=metadata)
