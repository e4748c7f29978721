"""Terminal-Bench 1 task directories as Harbor task directories, and so as rows of ``harbor``.

A Terminal-Bench 1 (TB1) task is a directory holding ``task.yaml`` (``instruction``, or the older
``descriptions`` list; ``author_email``, ``difficulty``, ``category``, ``tags``, ``max_agent_timeout_sec``,
``max_test_timeout_sec``, ``run_tests_in_same_shell``, ``parser_name``...), ``Dockerfile`` and
``docker-compose.yaml`` (the ``client`` service the agent works in), ``run-tests.sh`` (the grader: it runs
pytest on ``$TEST_DIR/test_outputs.py``), ``tests/`` and ``solution.sh`` (or ``solution.yaml``, a list of
terminal commands). Harbor, TB1's successor, carries the same things in its own layout, which the
``harbor`` environment runs; so importing converts each TB1 task into a Harbor task directory
(under ``tasks_dir``) and reads that with ``adapters.harbor``. One way to run both formats means a TB1
task gets whatever Harbor tasks get (an image built from ``environment/Dockerfile`` where an engine is
available, the local sandbox marked ``approximate`` where not).

How a TB1 task is graded, as its harness does: ``run-tests.sh`` runs from the task's working directory
with ``TEST_DIR`` naming the tests' directory (``/tests``), and the verdict is pytest's report: a
``short test summary info`` section with a ``FAILED`` or ``ERROR`` entry is a fail, one with only
``PASSED`` entries a pass, and without that section pytest's exit status decides. TB1's harness-provided
``setup-uv-pytest.sh`` / ``run-uv-pytest.sh`` install uv and pytest from the network, which a sandbox
does not have: stand-ins run pytest offline instead, and the pytest of the importing Python is bundled
with the tests (``bundle_pytest``), because TB1's harness always provides one. A test that cannot run
(no ``python3``, no pytest, no network) is ``failed(environment)`` by ``palaestra.core.grading``, never 0.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from palaestra.adapters.harbor import HARBOR_ENV, _dockerfile, env_spec, harbor_task
from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task

MARKER = ".palaestra-tb1"  # written into every converted directory: only those are ever replaced
PYTEST_DIR = ".palaestra-pytest"  # under tests/: the bundled pytest, put on PYTHONPATH by the runner
_PYTEST_DISTS = ("pytest", "pluggy", "iniconfig", "packaging")
_NOT_CONTEXT = {"task.yaml", "solution.sh", "solution.yaml", "run-tests.sh", "tests", MARKER}
_NETWORK_HINTS = ("curl ", "wget ", "apt-get install", "pip install", "uv pip install", "astral.sh")
# TB1's run-tests.sh as a Harbor tests/test.sh: TB1's TEST_DIR, then the verdict from pytest's report
_TEST_SH = """#!/bin/bash
# Terminal-Bench 1 grading, converted by palaestra: run-tests.sh from the working directory with TEST_DIR
# set, as TB1's harness runs it; pass/fail is read from pytest's report (see adapters/terminal_bench.py).
export TEST_DIR="${TESTS_DIR:-/tests}"
if [ -d "$TEST_DIR/@PYTEST@" ]; then export PYTHONPATH="$TEST_DIR/@PYTEST@${PYTHONPATH:+:$PYTHONPATH}"; fi
log="${TMPDIR:-/tmp}/palaestra-tb1-output.txt"
bash "$TEST_DIR/run-tests.sh" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
summary=$(sed -n '/short test summary info/,$p' "$log")
if [ -n "$summary" ]; then
  if printf '%s\\n' "$summary" | grep -Eq '^(FAILED|ERROR) '; then exit 1; fi
  if printf '%s\\n' "$summary" | grep -Eq '^PASSED '; then exit 0; fi
fi
if grep -q '^INTERNALERROR>' "$log"; then
  echo "test.sh: pytest failed internally (a broken test runner)" >&2
  exit 126
fi
if [ "$status" -ne 0 ] && ! grep -q 'test session starts' "$log"; then
  # pytest never ran its tests: the grader could not run, not a wrong answer (network errors say so themselves)
  if grep -Eiq 'resolve host|name resolution|network is unreachable|failed to establish' "$log"; then exit "$status"; fi
  echo "test.sh: run-tests.sh exited $status before pytest ran any test (a missing or broken test runner)" >&2
  exit 126
fi
exit "$status"
""".replace("@PYTEST@", PYTEST_DIR)
# stand-ins for the scripts TB1's harness copies next to the tests: offline, no uv
_SETUP_UV = """#!/bin/bash
# palaestra's stand-in for Terminal-Bench's setup-uv-pytest.sh: no network here, so nothing is installed;
# the pytest bundled with the tests (on PYTHONPATH, set by test.sh) or the image's own is used.
true
"""
_RUN_UV = """#!/bin/bash
# palaestra's stand-in for Terminal-Bench's run-uv-pytest.sh: pytest on test_outputs.py, reporting all.
exec python3 -m pytest "$TEST_DIR/test_outputs.py" -rA
"""


@dataclass
class TB1Import:
    """The rows read from a Terminal-Bench 1 dataset, where their converted directories are, and what
    each task could not carry over."""

    tasks: list[Task] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    tasks_dir: Path | None = None


def is_tb1_task(path: Path) -> bool:
    """A TB1 task directory: ``task.yaml`` beside ``run-tests.sh`` or ``tests/``."""
    return (path / "task.yaml").is_file() and ((path / "run-tests.sh").is_file() or (path / "tests").is_dir())


def find_tb1_dirs(root: Path) -> list[Path]:
    """``root`` itself when it is a TB1 task, else every TB1 task below it, sorted."""
    if is_tb1_task(root):
        return [root]
    return sorted(p.parent for p in root.rglob("task.yaml") if p.parent != root and is_tb1_task(p.parent))


def read_task_yaml(path: Path) -> dict[str, Any]:
    """``task.yaml`` as a mapping; the instruction from ``instruction`` or the ``base`` description."""
    try:
        meta = yaml.safe_load((path / "task.yaml").read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise InvalidTask(f"{path}/task.yaml: not valid YAML ({exc})", hint="fix task.yaml") from None
    if not isinstance(meta, dict):
        raise InvalidTask(f"{path}/task.yaml is not a mapping", hint="task.yaml holds instruction: ... and friends")
    instruction = meta.get("instruction")
    if not instruction and isinstance(meta.get("descriptions"), list):
        found = [d for d in meta["descriptions"] if isinstance(d, dict) and d.get("key", "base") == "base"]
        instruction = found[0].get("description") if found else None
    if not isinstance(instruction, str) or not instruction.strip():
        raise InvalidTask(f"{path}/task.yaml has no instruction", hint="add `instruction: |` with the task")
    meta["instruction"] = instruction.strip()
    return meta


def _toml_value(value: Any) -> str:
    """A TOML value: strings in JSON's escapes (valid TOML basic strings), lists of strings, numbers, bools."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(str(v)) for v in value) + "]"
    return json.dumps(str(value))


def _task_toml(name: str, meta: dict[str, Any]) -> str:
    labels = {k: meta[k] for k in ("difficulty", "category", "author_name", "author_email")
              if isinstance(meta.get(k), str) and meta[k]}
    tags = [t for t in meta.get("tags") or [] if isinstance(t, str)]
    lines = ['version = "1.0"', "", "[task]", f"name = {_toml_value(name)}", "", "[metadata]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in labels.items()]
    if tags:
        lines.append(f"tags = {_toml_value(tags)}")
    # TB1's defaults when task.yaml names no timeouts: 180 s for the agent, 30 s for the tests
    lines += ["", "[agent]", f"timeout_sec = {float(meta.get('max_agent_timeout_sec') or 180.0)!r}",
              "", "[verifier]", f"timeout_sec = {float(meta.get('max_test_timeout_sec') or 30.0)!r}", ""]
    return "\n".join(lines)


def _solution(path: Path) -> tuple[str | None, str | None]:
    """(solve.sh for the converted task, a warning): ``solution.sh`` as is, or ``solution.yaml``'s
    commands as lines of a script when every one is a command line (``append_enter``), not keystrokes."""
    if (path / "solution.sh").is_file():
        return (path / "solution.sh").read_text(encoding="utf-8"), None
    if not (path / "solution.yaml").is_file():
        return None, "no solution.sh or solution.yaml: `palaestra env check` cannot play this task's reference"
    try:
        steps = yaml.safe_load((path / "solution.yaml").read_text(encoding="utf-8")) or []
    except yaml.YAMLError as exc:
        return None, f"solution.yaml is not valid YAML ({exc}); no reference"
    commands = []
    for step in steps if isinstance(steps, list) else []:
        if not isinstance(step, dict) or not isinstance(step.get("command"), str):
            return None, "solution.yaml has an entry without a command; no reference"
        if step.get("append_enter") is False:
            return None, (f"solution.yaml sends keystrokes ({step['command']!r}) that the run tool cannot "
                          "type; no reference")
        commands.append(step["command"])
    return "#!/bin/bash\n" + "\n".join(commands) + "\n", None


def _pytest_closure() -> list[str]:
    """pytest and every distribution it requires here (its requirements, whose markers apply, taken
    recursively): the set differs between pytest versions (9 needs pygments), so it is read, not listed."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen: list[str] = []
    todo = list(_PYTEST_DISTS)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.append(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # reported by bundle_pytest
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name.lower().replace("_", "-"))
    return seen


def bundle_pytest(tests_dir: Path) -> bool:
    """Copy the importing Python's pytest and the distributions it needs (files and metadata, which
    pytest reads at start) under ``tests_dir``; False when one of them is not installed."""
    from importlib import metadata

    copies: list[tuple[Path, Path]] = []
    for name in _pytest_closure():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return False
        for rel in dist.files or []:
            parts = Path(str(rel)).parts
            if ".." in parts or "__pycache__" in parts or str(rel).endswith(".pyc"):
                continue  # console scripts outside site-packages, and bytecode
            copies.append((Path(str(dist.locate_file(rel))), tests_dir / PYTEST_DIR / Path(*parts)))
    for src, dest in copies:
        if src.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    return True


def _link_or_copy(src: str, dest: str) -> None:
    """Hard links where the file system allows (one bundled pytest shared by every task), else a copy."""
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def convert_task(path: Path, dest: Path, *, with_pytest: bool = True,
                 pytest_bundle: Path | None = None) -> tuple[dict[str, Any], list[str]]:
    """Write the Harbor task directory for the TB1 task at ``path`` into ``dest`` (replaced when it is a
    conversion of ours); return task.yaml's fields and the warnings about what did not carry over.
    ``pytest_bundle``: a directory made by ``bundle_pytest`` to link into the tests (else one is made)."""
    meta = read_task_yaml(path)
    if not (path / "run-tests.sh").is_file():
        raise InvalidTask(f"Terminal-Bench task {path} has no run-tests.sh", hint="add the grading script")
    if dest.exists():
        if not (dest / MARKER).is_file():
            raise InvalidTask(f"{dest} exists and is not a conversion written by palaestra",
                              hint="give another --tasks-dir")
        shutil.rmtree(dest)
    warnings: list[str] = []
    (dest / "environment").mkdir(parents=True)
    for item in sorted(path.iterdir()):  # the build context: Dockerfile, docker-compose.yaml, task files
        if item.name in _NOT_CONTEXT or item.is_symlink():
            continue
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, dest / "environment" / item.name)
    shutil.copytree(path / "tests", dest / "tests") if (path / "tests").is_dir() else (dest / "tests").mkdir()
    run_tests = (path / "run-tests.sh").read_text(encoding="utf-8")
    (dest / "tests" / "run-tests.sh").write_text(run_tests, encoding="utf-8")
    (dest / "tests" / "test.sh").write_text(_TEST_SH, encoding="utf-8")
    for name, text in (("setup-uv-pytest.sh", _SETUP_UV), ("run-uv-pytest.sh", _RUN_UV)):
        if name in run_tests and not (dest / "tests" / name).exists():
            (dest / "tests" / name).write_text(text, encoding="utf-8")
    if with_pytest and pytest_bundle is not None and (pytest_bundle / PYTEST_DIR).is_dir():
        shutil.copytree(pytest_bundle / PYTEST_DIR, dest / "tests" / PYTEST_DIR, copy_function=_link_or_copy)
    elif with_pytest and not bundle_pytest(dest / "tests"):
        warnings.append("pytest is not installed where palaestra runs, so none is bundled with the tests: "
                        "they need one in the image (else failed(environment))")
    fetches = sorted({h.strip() for h in _NETWORK_HINTS if h in run_tests})
    if fetches:
        warnings.append(f"run-tests.sh installs from the network ({', '.join(fetches)}); the sandbox has none, so "
                        "its rollouts are failed(environment) unless the row sets metadata.network = \"host\"")
    if meta.get("run_tests_in_same_shell"):
        warnings.append("run_tests_in_same_shell: the tests run in a fresh shell on a copy of the working "
                        "directory, so variables the agent exported are not seen")
    solve, note = _solution(path)
    if solve is not None:
        (dest / "solution").mkdir()
        (dest / "solution" / "solve.sh").write_text(solve, encoding="utf-8")
    if note:
        warnings.append(note)
    (dest / "instruction.md").write_text(meta["instruction"] + "\n", encoding="utf-8")
    (dest / "task.toml").write_text(_task_toml(path.name, meta), encoding="utf-8")
    (dest / MARKER).write_text(str(path.resolve()) + "\n", encoding="utf-8")
    return meta, warnings


def import_terminal_bench(root: str | Path, tasks_dir: str | Path, *, env: str = "harbor",
                          id_prefix: str = "tb1-", with_pytest: bool = True,
                          base_image: str | None = None) -> TB1Import:
    """Every TB1 task under ``root``, converted into ``tasks_dir``, as task rows; a broken task is
    skipped and named, not fatal."""
    base = Path(root)
    if not base.is_dir():
        raise InvalidTask(f"Terminal-Bench dataset not found: {base}",
                          hint="give a task directory (with task.yaml) or a folder of them")
    converted = Path(tasks_dir).resolve()
    out = TB1Import(tasks_dir=converted)
    seen: set[str] = set()
    bundle = converted / ".palaestra-bundle"  # one copy of pytest, hard-linked into every task's tests/
    if with_pytest:
        shutil.rmtree(bundle, ignore_errors=True)
        bundle_pytest(bundle)
    for path in find_tb1_dirs(base):
        name = path.name
        while name in seen:
            name = f"{name}-{len(seen)}"
        seen.add(name)
        try:
            meta, notes = convert_task(path, converted / name, with_pytest=with_pytest, pytest_bundle=bundle)
            task, harbor_notes = harbor_task(converted / name, env=env, id_prefix=id_prefix, base_image=base_image)
        except InvalidTask as exc:
            out.skipped.append(f"{path}: {exc}")
            continue
        md = dict(task.metadata)
        md["terminal_bench"] = {"source": str(path.resolve()), "parser": meta.get("parser_name") or "pytest",
                                **{k: meta[k] for k in ("author_email", "run_tests_in_same_shell") if k in meta}}
        dropped = _dockerfile(converted / name)[2]
        if dropped and "image" not in md and env_spec(env) != HARBOR_ENV:  # no build step ran: say so
            md["approximate"] = {"reason": "dockerfile_steps_not_applied", "steps": dropped[:10]}
        tags = ["terminal-bench", *[t for t in task.tags if t != "harbor"]]
        out.tasks.append(task.model_copy(update={"metadata": md, "tags": tags}))
        out.warnings += [f"{task.id}: {n}" for n in notes] + harbor_notes
    if not out.tasks and not out.skipped:
        raise InvalidTask(f"no Terminal-Bench tasks under {base}",
                          hint="a task directory holds task.yaml, run-tests.sh and tests/")
    return out
