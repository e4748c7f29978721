"""``terminal``: Harbor-style tasks solved with shell tools in a sandbox, graded in a *fresh* one.

The agent works in one sandbox per session (``run``, ``write_file``, ``read_file``), starting from the
task's ``workspace/``. Grading copies only the agent's working directory into a new sandbox, puts the
task's ``tests/`` beside it (never where the agent could have written them), and runs
``tests/test.sh``: exit 0 is a pass, or the script writes a reward in [0, 1] to
``$PALAESTRA_REWARD_FILE``. Whatever the agent changed outside its working directory, or did to the
tests it could read, is gone. Whether the test's run is a verdict or a failure (a missing test runner, an
unwritten reward file, no network, a timeout...) is decided by ``palaestra.core.grading``: a failure is
``failed(kind)``, never a 0.

Tasks: a row's ``metadata.task_dir`` names a task directory (relative: one bundled under
``data/tasks/``; absolute: your own, e.g. converted Harbor tasks). See ``taskdir.py`` for the layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from palaestra.core.environment import Environment
from palaestra.core.errors import FailureKind, InvalidTask, ToolError
from palaestra.core.grading import (
    GradingFailure,
    GradingProbe,
    RewardFile,
    TestRun,
    grade_test_run,
    require_network,
)
from palaestra.core.records import Reference, Task, ToolCall, Trajectory, Verdict
from palaestra.core.tools import tool
from palaestra.envs.terminal.taskdir import TaskDir, load_task_dir
from palaestra.sandbox import Sandbox, SandboxProvider, SandboxSpec
from palaestra.sandbox.envsupport import labels_for, provider_for

SYSTEM = (
    "You are working in a Linux sandbox without network access. Your current directory holds the task's "
    "files. Use the tools: run(cmd) runs a shell command there, write_file and read_file handle files "
    "(paths relative to that directory). Finish the task, then reply with a short summary of what you did."
)
TESTS_DIR = "/tmp/palaestra-tests"
REWARD_FILE = "/tmp/palaestra-logs/reward.txt"
REWARD_FILES = ("reward.txt", "reward.json")  # Harbor's names, looked for in REWARD_FILE's directory
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

    def __init__(self, sandbox: str | SandboxProvider | None = None, *, run_id: str | None = None) -> None:
        """``sandbox``: the provider (a name or an instance) for tasks naming none in ``metadata.sandbox``;
        ``run_id`` labels the sandboxes this run creates."""
        self._cache: dict[Path, TaskDir] = {}
        self.sandbox = sandbox
        self.run_id = run_id

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
                           labels=labels_for(self.name, task, run_id=self.run_id, role=role), network=_network(task),
                           lifetime_s=td.agent_timeout_s + td.verifier_timeout_s + 600)

    # ---- session ----------------------------------------------------------------------------------
    async def seed(self, task: Task) -> TerminalState:
        td = self._taskdir(self._path(task))
        # before any sandbox or model call: a task that cannot be graded here is failed(environment) now
        require_network(td.needs_network, _network(task) == "host", task=task,
                        why="; ".join(sorted(set(td.needs_network.values()))) + " in task.toml")
        box = await provider_for(task, self.sandbox).create(self._spec(task, td, "agent", {}))
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
        except ValueError as exc:  # the agent left too much, or something unreadable: its answer, a 0
            return Verdict(reward=0.0, passed=False, metadata={"reason": f"workspace not gradable: {exc}"})
        harbor = _harbor_style(state.task, td)
        provider = provider_for(state.task, self.sandbox)
        async with await provider.create(self._spec(state.task, td, "grade", {})) as fresh:
            tests = td.tests
            if harbor:  # a Harbor task: its fixed paths
                tests = harbor_paths(tests, fresh.resolve(TESTS_DIR), fresh.resolve(REWARD_FILE))
            try:
                await fresh.upload_tar(workspace, ".")
                await _copy_in(fresh, tests, {k: 0o755 for k in tests}, TESTS_DIR)
            except ValueError as exc:  # the workspace was within limits when archived: the sandbox's failure
                raise GradingFailure("sandbox", "sandbox_setup", f"the grading sandbox could not be set up: "
                                     f"{exc}") from exc
            script = f"{fresh.resolve(TESTS_DIR)}/test.sh"
            result = await fresh.exec(
                ["/bin/sh", "-c", _SCRIPT, "sh", script], timeout=td.verifier_timeout_s,
                env={"TESTS_DIR": fresh.resolve(TESTS_DIR), "PALAESTRA_REWARD_FILE": fresh.resolve(REWARD_FILE)})
            rewards = [await _reward_file(fresh, name) for name in REWARD_FILES]
            run = TestRun(exit_code=result.exit_code, stdout=result.stdout, stderr=result.stderr,
                          failure=result.failure, detail=result.detail, timeout_s=td.verifier_timeout_s,
                          reward_files=rewards, agent_paths=(fresh.workdir,))
        verdict = grade_test_run(run, reward_required=harbor and _writes_reward(td.tests))
        if state.task.metadata.get("approximate") and not state.task.metadata.get("image"):
            # an imported task whose Dockerfile steps no sandbox here applied: its verdict says so
            verdict.metadata["approximate"] = state.task.metadata["approximate"]
        return verdict

    def grading_probes(self, task: Task, workdir: Path) -> list[GradingProbe]:
        """For ``env check``: copies of ``task`` (same sandbox, image and workdir) whose test script cannot
        grade — its test runner is missing (exit 127), or it writes a reward that is no number. Each must
        come back failed(kind), not 0."""
        td = self._taskdir(self._path(task))
        shapes: list[tuple[str, FailureKind, str]] = [
            ("missing test runner", "environment", "#!/bin/sh\npalaestra-no-such-test-runner --run\n"),
            ("unparsable reward file", "verifier", '#!/bin/sh\necho not-a-number > "$PALAESTRA_REWARD_FILE"\n'),
        ]
        probes = []
        for name, kind, test in shapes:
            root = workdir / name.replace(" ", "-")
            (root / "tests").mkdir(parents=True)
            (root / "instruction.md").write_text(td.instruction, encoding="utf-8")
            (root / "tests" / "test.sh").write_text(test, encoding="utf-8")
            metadata = {k: v for k, v in task.metadata.items() if k != "harbor"} | {"task_dir": str(root)}
            probe = task.model_copy(update={"id": f"{task.id}-probe-{root.name}", "metadata": metadata})
            probes.append(GradingProbe(name, probe, kind))
        return probes

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


def _network(task: Task) -> Literal["none", "host"]:
    """A row may let its sandboxes reach the network (``metadata.network = "host"``); the default is none."""
    return "host" if task.metadata.get("network") == "host" else "none"


def _harbor_style(task: Task, td: TaskDir) -> bool:
    """An imported Harbor task, or a Harbor task directory named directly: its tests use Harbor's paths."""
    return task.metadata.get("harbor") is not None or any(b"/logs/verifier" in data for data in td.tests.values())


def _writes_reward(tests: dict[str, bytes]) -> bool:
    """The tests mean to write a reward file (Harbor's convention): then not writing one is a failure."""
    return any(b"/logs/verifier" in data or b"reward.txt" in data or b"reward.json" in data
               for data in tests.values())


async def _reward_file(box: Sandbox, name: str) -> RewardFile:
    """A reward file's state: not written (``text`` None), its text, or why it could not be read."""
    path = f"{REWARD_FILE.rsplit('/', 1)[0]}/{name}"
    try:
        data = await box.download(path, max_bytes=4096)
    except ValueError as exc:
        if "No such file" in str(exc):
            return RewardFile(name)
        return RewardFile(name, error=str(exc)[:300])
    return RewardFile(name, text=data.decode(errors="replace"))
