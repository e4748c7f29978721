"""Which tasks a run holds: rows of a task file, an environment's bundled examples, or several
(dataset × agent × model) entries of a run file, all checked before anything starts.

Checked means two things: each row parses as a task (``tasks.load_task_file``), and each row holds what
its environment needs (the environment's ``check_task``). A row that fails either is reported with its
file, line, field and fix — every such row at once — and the run refuses to start, or, with
``skip_invalid``, runs without exactly those rows and lists them. A row that lacks its ground truth
would otherwise fail every attempt at run time, after the model was paid for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError, InvalidTask
from palaestra.core.records import Task
from palaestra.envs.registry import load_env_class
from palaestra.rollout.config import RunConfig, RunEntry
from palaestra.rollout.tasks import RowProblem, load_task_file, problem_from_check

# At most this many problems go into the error message; the count always covers all of them.
MAX_LISTED = 1000


@dataclass
class _Row:
    task: Task
    file: str
    line: int


def _checker(cache: dict[str, Environment | ConfigError], name: str) -> Environment | ConfigError:
    """One environment instance per name for the checks (or the error that loading it gave)."""
    if name not in cache:
        try:
            cache[name] = load_env_class(name)()
        except ConfigError as exc:
            cache[name] = exc
        except Exception as exc:  # an environment whose constructor fails cannot run any of its rows
            cache[name] = ConfigError(f"environment '{name}' cannot be created: {type(exc).__name__}: {exc}")
    return cache[name]


def check_rows(rows: list[_Row]) -> list[RowProblem]:
    """Every row against its environment: known environment, then ``check_task``, then (for an
    environment that takes its prompt from the row as it is) a prompt that says something. Never raises
    for a row; collects one problem per bad row so all are reported at once."""
    cache: dict[str, Environment | ConfigError] = {}
    problems: list[RowProblem] = []
    for row in rows:
        env = _checker(cache, row.task.env)
        if isinstance(env, ConfigError):
            problems.append(RowProblem(row.file, row.line, "env", env.message, env.hint))
            continue
        try:
            env.check_task(row.task)
        except Exception as exc:
            problems.append(problem_from_check(row.file, row.line, exc))
            continue
        if type(env).prompt is Environment.prompt and not _has_content(env.prompt(row.task)):
            problems.append(RowProblem(row.file, row.line, "input", "empty: the model would be sent no prompt at all "
                                       f"(environment '{env.name}' builds none from the row)",
                                       "put the prompt in `input`"))
    return problems


def _has_content(messages: list[dict[str, object]]) -> bool:
    """Whether any message says something (text, or content parts such as an image)."""
    for m in messages:
        content = m.get("content")
        if (isinstance(content, str) and content.strip()) or (not isinstance(content, str) and content):
            return True
    return False


def _load(input_path: str | None, env: str | None, limit: int | None,
          routes: dict[str, str] | None = None) -> tuple[list[_Row], list[RowProblem]]:
    default_env = load_env_class(env).name if env else ""  # a user file's spec → its short name
    if input_path:
        loaded = load_task_file(input_path, default_env, routes)  # routes: NeMo Gym agent_ref → environment
        name = Path(input_path).name
        rows = [_Row(t, name, line) for t, line in zip(loaded.tasks, loaded.lines, strict=True)]
        problems = list(loaded.problems)
    elif env:
        rows = [_Row(t, f"{env} (bundled examples)", i) for i, t in enumerate(load_env_class(env)().examples(), 1)]
        problems = []
    else:
        raise ConfigError("no tasks: give --input FILE or --env NAME")
    problems += check_rows(rows)
    bad = {(p.file, p.line) for p in problems}
    good = [r for r in rows if (r.file, r.line) not in bad]
    problems.sort(key=lambda p: (p.file, p.line))
    return (good[:limit] if limit else good), problems


def refuse(problems: list[RowProblem]) -> InvalidTask:
    """The error that stops a run: every bad row (up to MAX_LISTED lines), then the way forward."""
    listing = "\n  ".join(str(p) for p in problems[:MAX_LISTED])
    more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    rows = len({(p.file, p.line) for p in problems})
    return InvalidTask(f"{rows} invalid task row(s), nothing was run:\n  {listing}{more}",
                       hint="fix the rows, or pass --skip-invalid to run without them")


def _entry_tasks(cfg: RunConfig, entry: RunEntry) -> tuple[list[Task], list[RowProblem]]:
    """An entry's tasks, with its agent and model pinned and ids made unique across entries."""
    rows, problems = _load(entry.input, entry.env or (cfg.env if not entry.input else None) or cfg.env,
                           entry.limit or cfg.limit, cfg.routes)
    pinned = []
    for row in rows:
        t = row.task
        pinned.append(t.model_copy(update={
            "id": f"{entry.name}/{t.id}",
            "agent": entry.agent or t.agent,
            "model": entry.model or t.model,
            "tags": [*t.tags, f"entry:{entry.name}"],
            "metadata": {**t.metadata, "entry": entry.name, "base_id": t.id},
        }))
    return pinned, [RowProblem(f"{entry.name}: {p.file}", p.line, p.field, p.message, p.fix) for p in problems]


def select_tasks(cfg: RunConfig) -> tuple[list[Task], list[str]]:
    """All tasks of the run and the rows skipped as invalid (only with skip_invalid; otherwise any
    invalid row raises InvalidTask listing every one of them)."""
    if cfg.entries:
        names = [e.name for e in cfg.entries]
        if len(set(names)) != len(names):
            raise ConfigError(f"run file entries must have distinct names, got {names}")
        tasks: list[Task] = []
        problems: list[RowProblem] = []
        for entry in cfg.entries:
            entry_tasks, entry_problems = _entry_tasks(cfg, entry)
            tasks += entry_tasks
            problems += entry_problems
    else:
        rows, problems = _load(cfg.input, cfg.env, cfg.limit, cfg.routes)
        tasks = [r.task for r in rows]
    if problems and not cfg.skip_invalid:
        raise refuse(problems)
    return tasks, [str(p) for p in problems]
