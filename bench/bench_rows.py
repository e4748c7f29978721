"""Rows the benches run on: an environment's bundled tasks, cycled to any count, each under an id of its own
(``TASKID-i``). Imported by the bench scripts beside it (``bench/`` is on ``sys.path`` for each of them)."""

from __future__ import annotations

from pathlib import Path

from palaestra.core.records import Task
from palaestra.envs.registry import load_env


def bundled_rows(env_name: str, n: int) -> list[Task]:
    """``n`` rows of ``env_name``'s bundled tasks, in order and again from the first, ids numbered."""
    base = load_env(env_name).examples()
    return [base[i % len(base)].model_copy(update={"id": f"{base[i % len(base)].id}-{i}"}) for i in range(n)]


def write_rows(path: Path, tasks: list[Task]) -> Path:
    """``tasks`` as a task file (JSONL) at ``path``, which `eval run --input` reads."""
    with path.open("w") as fh:
        for t in tasks:
            fh.write(t.model_dump_json() + "\n")
    return path
