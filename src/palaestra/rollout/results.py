"""Reading a run back: the journal's records expanded into Rollouts (every unreadable line named, none
dropped silently), the counts a run expects, and each environment's own metrics hook. Shared by the
orchestrator (metrics.json) and ``reverify``."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaestra.core.records import Rollout, Task
from palaestra.envs.registry import load_env_class
from palaestra.rollout import rundir
from palaestra.rollout.compact import CompactError, RunTasks, expand_record
from palaestra.rollout.journal import read_journal


def expected_counts(tasks: list[Task], repeats: int) -> dict[tuple[str, str], int]:
    return {(t.env, t.id): repeats for t in tasks}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a run is read back and summarised; on again after (if it was).

    Reading a journal back turns every record into a tree of new dicts and lists (~570 objects for a
    multi-turn record) that stay alive until the report is written. As the heap grows, CPython's full
    collections keep firing and walk all of it each time: 25-40 % of the read-back's CPU (265 -> 164 µs
    per 12 KB `workplace` record, 54 -> 42 µs per `mcqa` record, 1,000 and 4,000 records). JSON data
    holds no reference cycles, and whatever else made one meanwhile is found by the next collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass
class JournalRead:
    """One read of a run's journal, shared by everything the end of a run writes (metrics.json and
    report.html), so the journal is read, parsed and expanded once rather than once per output.

    ``records`` are the journal's JSON objects as written, in order (the report's ``seq`` is the index);
    ``rollouts`` are the records that are valid Rollouts; ``problems`` the lines that are not JSON
    records and ``invalid`` the records that are JSON but not Rollouts, each naming its line. Expanded
    records are not kept: holding them beside ``records`` and ``rollouts`` cost 15 MB more peak RSS on a
    2,000-rollout run for ~0.01 ms of CPU per rollout, so the report expands again what it renders."""

    records: list[dict[str, Any]] = field(default_factory=list)
    rollouts: list[Rollout] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)


def read_run_journal(path: Path, *, on_expanded: Callable[[int, dict[str, Any]], None] | None = None
                     ) -> JournalRead:
    """Read the journal at ``path`` once: every record parsed, expanded and validated as a Rollout (a
    record read back is always checked; none is trusted for having been written by this process).

    ``on_expanded(seq, record)`` sees each record that expands, with its index in ``records``, before the
    expanded form is dropped: the end of a run encodes report transcripts there instead of expanding
    every record a second time."""
    lines: list[int] = []
    records, problems = read_journal(path, missing_ok=True, lines=lines)
    out = JournalRead(records=records, problems=problems)
    tasks = RunTasks(path.parent / rundir.TASKS)  # compact records reference their task's input
    for seq, (lineno, r) in enumerate(zip(lines, records, strict=True)):
        try:
            full = expand_record(r, tasks)
        except CompactError as exc:
            out.invalid.append(f"{path}:{lineno}: cannot be expanded ({exc}); line skipped")
            continue
        if on_expanded is not None:
            on_expanded(seq, full)
        try:
            out.rollouts.append(Rollout.model_validate(full))
        except ValueError as exc:
            errors = getattr(exc, "errors", None)
            first = errors()[0] if callable(errors) and errors() else None
            why = f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first else str(exc)[:200]
            out.invalid.append(f"{path}:{lineno}: not a Rollout ({why}); line skipped")
    return out


def read_rollouts(path: Path) -> tuple[list[dict[str, Any]], list[Rollout], list[str], list[str]]:
    """The journal's records, its valid Rollouts, the lines that are not JSON records (torn, garbage), and
    the records that are JSON but not Rollouts — each problem naming its line, so none is dropped
    silently."""
    read = read_run_journal(path)
    return read.records, read.rollouts, read.problems, read.invalid


def parse_records(records: list[dict[str, Any]]) -> list[Rollout | dict[str, Any]]:
    """Journal dicts → Rollouts, once; an invalid one stays a dict so compute_metrics can report it."""
    out: list[Rollout | dict[str, Any]] = []
    for r in records:
        try:
            out.append(Rollout.model_validate(r))
        except ValueError:
            out.append(r)
    return out


def env_metrics(rollouts: list[Rollout | dict[str, Any]]) -> dict[str, Any]:
    """Each environment's own metrics hook, over its valid journal records."""
    by_env: dict[str, list[Rollout]] = {}
    for r in rollouts:
        if isinstance(r, Rollout):
            by_env.setdefault(r.env, []).append(r)
    out: dict[str, Any] = {}
    for name, env_rollouts in sorted(by_env.items()):
        try:
            extra = load_env_class(name)().metrics(env_rollouts)
        except Exception as exc:  # a buggy hook must not cost the run its metrics
            extra = {"error": f"{type(exc).__name__}: {exc}"}
        if extra:
            out[name] = extra
    return out
