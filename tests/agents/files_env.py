"""A test environment that holds a small tree of text files and offers the shell/file tools an external
CLI's workspace bridge uses (``run``, ``read_file``, ``write_file``): the CLI's edits count only once
they reach this environment's state. Passes when every file in ``metadata.expect`` has that content
and every path in ``metadata.absent`` is gone."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from palaestra import Environment, Task, ToolError, Trajectory, Verdict, tool


@dataclass
class FilesState:
    task: Task
    files: dict[str, str]


class FilesEnv(Environment):
    name = "files"

    def seed(self, task: Task) -> FilesState:
        return FilesState(task, dict(task.metadata.get("files", {})))

    @tool
    def run(self, state: FilesState, cmd: str) -> str:
        """Run a shell command in the working directory.

        Args:
            cmd: the command line.
        """
        with tempfile.TemporaryDirectory(prefix="pal-files-") as tmp:
            root = Path(tmp)
            for rel, text in state.files.items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text)
            done = subprocess.run(["sh", "-c", cmd], cwd=root, capture_output=True, text=True, timeout=10)
            state.files = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}
        return f"exit {done.returncode}\n{done.stdout}{done.stderr}"

    @tool
    def read_file(self, state: FilesState, path: str) -> str:
        """Read a file.

        Args:
            path: relative path.
        """
        if path not in state.files:
            raise ToolError(f"no file {path}")
        return state.files[path]

    @tool
    def write_file(self, state: FilesState, path: str, content: str) -> str:
        """Write a file.

        Args:
            path: relative path.
            content: the new content.
        """
        state.files[path] = content
        return f"wrote {path}"

    def verify(self, state: FilesState, trajectory: Trajectory) -> Verdict:
        md = state.task.metadata
        ok = all(state.files.get(p) == c for p, c in md.get("expect", {}).items())
        ok = ok and not any(p in state.files for p in md.get("absent", []))
        return Verdict(reward=1.0 if ok else 0.0, passed=ok)
