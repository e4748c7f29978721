"""Which tasks a run holds: rows of a task file, an environment's bundled examples, or several
(dataset × agent × model) entries of a run file, all checked before anything starts."""

from __future__ import annotations

from palaestra.core.errors import ConfigError, InvalidTask
from palaestra.core.records import Task
from palaestra.envs.registry import load_env_class
from palaestra.rollout.config import RunConfig, RunEntry
from palaestra.rollout.tasks import load_task_file


def _load(input_path: str | None, env: str | None, limit: int | None, skip_invalid: bool
          ) -> tuple[list[Task], list[str]]:
    skipped: list[str] = []
    default_env = load_env_class(env).name if env else ""  # a user file's spec → its short name
    if input_path:
        loaded = load_task_file(input_path, default_env)
        if loaded.problems:
            if not skip_invalid:
                listing = "\n  ".join(str(p) for p in loaded.problems[:20])
                more = f"\n  ... and {len(loaded.problems) - 20} more" if len(loaded.problems) > 20 else ""
                raise InvalidTask(f"{len(loaded.problems)} invalid task row(s):\n  {listing}{more}",
                                  hint="fix the rows, or pass --skip-invalid to run without them")
            skipped = [str(p) for p in loaded.problems]
        tasks = loaded.tasks
    elif env:
        tasks = load_env_class(env)().examples()
    else:
        raise ConfigError("no tasks: give --input FILE or --env NAME")
    return (tasks[:limit] if limit else tasks), skipped


def _entry_tasks(cfg: RunConfig, entry: RunEntry) -> tuple[list[Task], list[str]]:
    """An entry's tasks, with its agent and model pinned and ids made unique across entries."""
    tasks, skipped = _load(entry.input, entry.env or (cfg.env if not entry.input else None) or cfg.env,
                           entry.limit or cfg.limit, cfg.skip_invalid)
    pinned = []
    for t in tasks:
        pinned.append(t.model_copy(update={
            "id": f"{entry.name}/{t.id}",
            "agent": entry.agent or t.agent,
            "model": entry.model or t.model,
            "tags": [*t.tags, f"entry:{entry.name}"],
            "metadata": {**t.metadata, "entry": entry.name, "base_id": t.id},
        }))
    return pinned, [f"{entry.name}: {s}" for s in skipped]


def select_tasks(cfg: RunConfig) -> tuple[list[Task], list[str]]:
    """All tasks of the run and the rows skipped as invalid (only with skip_invalid)."""
    if cfg.entries:
        names = [e.name for e in cfg.entries]
        if len(set(names)) != len(names):
            raise ConfigError(f"run file entries must have distinct names, got {names}")
        tasks, skipped = [], []
        for entry in cfg.entries:
            entry_tasks, entry_skipped = _entry_tasks(cfg, entry)
            tasks += entry_tasks
            skipped += entry_skipped
    else:
        tasks, skipped = _load(cfg.input, cfg.env, cfg.limit, cfg.skip_invalid)
    for t in tasks:  # every row must name a known environment before anything starts
        try:
            load_env_class(t.env)
        except ConfigError as exc:
            raise ConfigError(f"task '{t.id}': {exc.message}", hint=exc.hint) from None
    return tasks, skipped
