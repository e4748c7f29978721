"""Harbor-style task directories, read without executing anything:

    <task>/instruction.md        what the agent is asked to do (the prompt)
    <task>/task.toml             optional: [agent] timeout_sec, [verifier] timeout_sec, and Harbor's
                                 network declarations (see ``network_needs``)
    <task>/workspace/...         files the agent starts with (its working directory)
    <task>/environment/...       accepted instead of workspace/ (Dockerfile and the like are skipped)
    <task>/tests/test.sh         the grader: exit 0 = solved (or a reward in $PALAESTRA_REWARD_FILE)
    <task>/solution/reference.json  reference tool calls: {"tool_calls": [...], "final_answer": "..."}
    <task>/solution/solve.sh     accepted instead: the reference becomes one run(cmd=solve.sh)
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaestra.core.errors import InvalidTask

_SKIP = {"Dockerfile", "docker-compose.yaml", "docker-compose.yml", ".dockerignore"}
MAX_FILES = 2000
MAX_BYTES = 32 << 20


@dataclass
class TaskDir:
    path: Path
    instruction: str
    workspace: dict[str, bytes]
    tests: dict[str, bytes]
    agent_timeout_s: float = 600.0
    verifier_timeout_s: float = 120.0
    reference: dict[str, Any] | None = None
    modes: dict[str, int] = field(default_factory=dict)
    needs_network: dict[str, str] = field(default_factory=dict)  # phase (agent, verifier) -> the declaration


_NETWORKED = ("public", "allowlist")


def network_needs(meta: dict[str, Any]) -> dict[str, str]:
    """The phases (``agent``, ``verifier``) whose task.toml declares they need the network, each with the
    declaration that says so: Harbor's ``[environment] network_mode`` (or the older ``allow_internet =
    true``) for both, overridden per phase by ``[agent]`` / ``[verifier] network_mode``. Only what is
    declared counts: a task.toml that says nothing needs nothing."""
    environment = meta.get("environment") or {}
    base: str | None = None
    if environment.get("allow_internet") is True:
        base = "[environment] allow_internet = true"
    mode = environment.get("network_mode")
    if isinstance(mode, str):
        base = f'[environment] network_mode = "{mode}"' if mode in _NETWORKED else None
    out: dict[str, str] = {}
    for phase in ("agent", "verifier"):
        section = meta.get(phase) or {}
        declared = section.get("network_mode") if isinstance(section, dict) else None
        if isinstance(declared, str):
            if declared in _NETWORKED:
                out[phase] = f'[{phase}] network_mode = "{declared}"'
        elif base:
            out[phase] = base
    return out


def _read_tree(root: Path) -> tuple[dict[str, bytes], dict[str, int]]:
    files: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    total = 0
    if not root.is_dir():
        return files, modes
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if name in _SKIP or full.is_symlink() or not full.is_file():
                continue
            data = full.read_bytes()
            total += len(data)
            if len(files) >= MAX_FILES or total > MAX_BYTES:
                raise InvalidTask(f"task directory {root} holds more than {MAX_FILES} files or {MAX_BYTES} bytes")
            files[rel] = data
            modes[rel] = 0o755 if os.access(full, os.X_OK) else 0o644
    return files, modes


def _toml(path: Path) -> dict[str, Any]:
    if not path.is_file() or sys.version_info < (3, 11):
        return {}
    import tomllib

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidTask(f"{path}: not valid TOML ({exc})", hint="fix task.toml") from None


def load_task_dir(path: Path) -> TaskDir:
    if not (path / "instruction.md").is_file():
        raise InvalidTask(f"terminal task {path} has no instruction.md",
                          hint="a task directory holds instruction.md, tests/test.sh and optionally workspace/")
    if not (path / "tests" / "test.sh").is_file():
        raise InvalidTask(f"terminal task {path} has no tests/test.sh", hint="add the grading script")
    workspace, modes = _read_tree(path / "workspace")
    if not workspace:
        workspace, modes = _read_tree(path / "environment")
    tests, _ = _read_tree(path / "tests")
    meta = _toml(path / "task.toml")
    reference = None
    ref_json = path / "solution" / "reference.json"
    solve = path / "solution" / "solve.sh"
    if ref_json.is_file():
        reference = json.loads(ref_json.read_text(encoding="utf-8"))
    elif solve.is_file():
        reference = {"tool_calls": [{"name": "run", "arguments": {"cmd": solve.read_text(encoding="utf-8")}}],
                     "final_answer": "Done."}
    return TaskDir(
        path=path, instruction=(path / "instruction.md").read_text(encoding="utf-8").strip(),
        workspace=workspace, tests=tests, modes=modes, reference=reference,
        agent_timeout_s=float((meta.get("agent") or {}).get("timeout_sec", 600.0)),
        verifier_timeout_s=float((meta.get("verifier") or {}).get("timeout_sec", 120.0)),
        needs_network=network_needs(meta),
    )
