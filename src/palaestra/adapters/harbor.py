"""Harbor task directories as task rows of the ``harbor`` environment (or of ``terminal``).

A Harbor task is a directory (``instruction.md``, ``task.toml``, ``environment/``, ``tests/test.sh``,
optionally ``solution/solve.sh``). The ``harbor`` environment (``adapters.harbor_env``) runs it as Harbor
does: the image built from ``environment/Dockerfile``, the tests run in the agent's container. The
``terminal`` environment reads the same directory and runs it on a local sandbox, approximately. So
importing means: find the task directories, check that they load, and write one row per task carrying
what ``task.toml`` says (memory, disk, cpus, timeouts) and its labels as tags.

Nothing is executed and nothing is copied: rows point at the directories where they are. What cannot be
carried over is reported as a warning per task (for ``terminal`` rows the Dockerfile steps it does not
run, a network the task declares it needs), never silently dropped. Grading follows the contract of
``palaestra.core.grading``: a test that writes Harbor's ``/logs/verifier/reward.txt`` (or ``reward.json``)
must write it, and a missing ``pytest``, an unwritten or unreadable reward or a network error is
``failed(kind)``, never a 0.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task

_DOCKER_STEPS_KEPT = {"FROM", "WORKDIR", "COPY", "ADD", "ENV", "LABEL", "ARG", "USER", "CMD", "ENTRYPOINT"}
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?)?\s*$", re.IGNORECASE)
_UNITS_MB = {"": 1.0, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024}


# The ``harbor`` environment, by its importable spec: it lives with this adapter, not among the built-in
# environments (it has no tasks of its own); rows name it so, and ``env="harbor"`` means it.
HARBOR_ENV = "palaestra.adapters.harbor_env:HarborEnvironment"


def env_spec(env: str) -> str:
    """``harbor`` → the harbor environment's spec; any other environment name as given."""
    return HARBOR_ENV if env == "harbor" else env


@dataclass
class HarborImport:
    """The rows read from a Harbor dataset, and what each task could not carry over."""

    tasks: list[Task] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def find_task_dirs(root: Path) -> list[Path]:
    """``root`` itself when it is a task, else every task directory below it (a dataset), sorted."""
    if (root / "instruction.md").is_file():
        return [root]
    return sorted(p.parent for p in root.rglob("instruction.md") if p.parent != root and _is_task_root(p.parent, root))


def _is_task_root(path: Path, root: Path) -> bool:
    """A directory inside another task (e.g. an ``instruction.md`` in ``environment/``) is not a task."""
    return not any((parent / "instruction.md").is_file() for parent in path.parents if root in parent.parents)


def _read_toml(path: Path) -> tuple[dict[str, Any], str | None]:
    if not path.is_file():
        return {}, None
    if sys.version_info < (3, 11):
        return {}, f"{path}: task.toml not read (needs Python 3.11+ for tomllib); defaults used"
    import tomllib

    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidTask(f"{path}: not valid TOML ({exc})", hint="fix task.toml") from None


def _megabytes(value: Any) -> int | None:
    """``2048`` (MB), ``"2G"``, ``"512Mi"`` → megabytes; None when absent or unreadable."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        m = _MEMORY.match(value)
        if m:
            unit = (m.group(2) or "").lower()[:1]
            return int(float(m.group(1)) * _UNITS_MB.get(unit, 1.0))
    return None


def _dockerfile(path: Path) -> tuple[str | None, str | None, list[str]]:
    """(base image, last WORKDIR, build steps the sandbox will not reproduce) of ``environment/Dockerfile``."""
    dockerfile = path / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        return None, None, []
    base = workdir = None
    dropped: list[str] = []
    text = dockerfile.read_text(encoding="utf-8", errors="replace").replace("\\\n", " ")
    for line in text.splitlines():
        words = line.strip().split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        op, rest = words[0].upper(), (words[1] if len(words) > 1 else "")
        if op == "FROM" and base is None:
            base = rest.split()[0] if rest else None
        elif op == "WORKDIR":
            workdir = rest.strip() or workdir
        elif op not in _DOCKER_STEPS_KEPT:
            dropped.append(f"{op} {rest}"[:80])
    return base, workdir, dropped


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "task"


def harbor_task(path: Path, *, env: str = "harbor", id_prefix: str = "harbor-",
                base_image: str | None = None) -> tuple[Task, list[str]]:
    """One Harbor task directory → one task row (for ``env``) and the warnings about it. ``base_image``:
    the local image the ``harbor`` environment builds on when the Dockerfile's ``FROM`` is not here."""
    from palaestra.envs.terminal.taskdir import load_task_dir

    env = env_spec(env)
    path = path.resolve()
    taskdir = load_task_dir(path)  # raises InvalidTask naming the missing file
    meta, toml_note = _read_toml(path / "task.toml")
    warnings = [toml_note] if toml_note else []
    task_section = meta.get("task") or {}
    labels = meta.get("metadata") or {}
    environment = meta.get("environment") or {}
    name = str(task_section.get("name") or path.name)
    base, workdir, dropped = _dockerfile(path)
    metadata: dict[str, Any] = {"task_dir": str(path)}
    image = environment.get("docker_image") or environment.get("image")
    if image:
        metadata["image"] = str(image)
    elif dropped and env != HARBOR_ENV:  # the harbor environment builds the image and so runs them
        warnings.append(f"environment/Dockerfile builds on {base or 'an unnamed image'} with steps the sandbox "
                        f"does not run ({'; '.join(dropped[:3])}{' ...' if len(dropped) > 3 else ''}): "
                        "set metadata.image to an image that has them")
    if workdir:
        metadata["workdir"] = workdir
    if base_image:
        metadata["base_image"] = base_image
    memory = _megabytes(environment.get("memory_mb", environment.get("memory")))
    disk = _megabytes(environment.get("storage_mb", environment.get("storage")))
    if memory:
        metadata["memory_mb"] = memory
    if disk:
        metadata["disk_mb"] = disk
    harbor: dict[str, Any] = {"name": name, "agent_timeout_s": taskdir.agent_timeout_s,
                              "verifier_timeout_s": taskdir.verifier_timeout_s}
    for key in ("difficulty", "category"):
        if labels.get(key):
            harbor[key] = labels[key]
    for key in ("cpus", "allow_internet", "build_timeout_sec"):
        if key in environment:
            harbor[key] = environment[key]
    if base:
        harbor["dockerfile_from"] = base
    if task_section.get("description"):
        harbor["description"] = task_section["description"]
    metadata["harbor"] = harbor
    tags = ["harbor"]
    for value in [labels.get("difficulty"), labels.get("category"), *(labels.get("tags") or []),
                  *(task_section.get("keywords") or [])]:
        if isinstance(value, str) and value and value not in tags:
            tags.append(value)
    if taskdir.reference is None:
        warnings.append("no solution/solve.sh: `palaestra env check` cannot play this task's reference")
    if taskdir.needs_network:  # terminal's sandboxes have none: its rollouts fail typed before they start
        harbor["needs_network"] = sorted(taskdir.needs_network)
        declared = "; ".join(sorted(set(taskdir.needs_network.values())))
        warnings.append(f"task.toml declares the network is needed ({declared}); the sandbox has none, so its "
                        "rollouts are failed(environment) unless the row sets metadata.network = \"host\"")
    task = Task(id=f"{id_prefix}{_slug(name)}", env=env, input=taskdir.instruction, metadata=metadata, tags=tags)
    return task, [f"{task.id}: {w}" for w in warnings]


def import_harbor(root: str | Path, *, env: str = "harbor", id_prefix: str = "harbor-",
                  base_image: str | None = None) -> HarborImport:
    """Every Harbor task under ``root`` as task rows; a broken task is skipped and named, not fatal."""
    base = Path(root)
    if not base.is_dir():
        raise InvalidTask(f"Harbor dataset not found: {base}",
                          hint="give a task directory (with instruction.md) or a folder of them")
    out = HarborImport()
    seen: dict[str, Path] = {}
    for path in find_task_dirs(base):
        try:
            task, warnings = harbor_task(path, env=env, id_prefix=id_prefix, base_image=base_image)
        except InvalidTask as exc:
            out.skipped.append(f"{path}: {exc}")
            continue
        if task.id in seen:
            task = task.model_copy(update={"id": f"{task.id}-{_slug(path.name)}"})
        seen[task.id] = path
        out.tasks.append(task)
        out.warnings += warnings
    if not out.tasks and not out.skipped:
        raise InvalidTask(f"no Harbor tasks under {base}",
                          hint="a task directory holds instruction.md and tests/test.sh")
    return out


def write_rows(path: str | Path, tasks: list[Task]) -> None:
    """The rows as JSONL, ready for ``palaestra eval run --input``."""
    with Path(path).open("wb") as fh:
        for task in tasks:
            fh.write(orjson.dumps(task.model_dump(mode="json", exclude_none=True)) + b"\n")
