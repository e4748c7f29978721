"""Reading a run back: the journal's records expanded into Rollouts (every unreadable line named, none
dropped silently), the counts a run expects, and each environment's own metrics hook. Shared by the
orchestrator (metrics.json) and ``reverify``."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaestra.core.environment import Environment
from palaestra.core.records import Rollout, Task
from palaestra.envs.registry import load_env_class
from palaestra.metrics.rows import Effective, Row, counted_row, rollout_problem, row_from_record, row_from_rollout
from palaestra.rollout import rundir
from palaestra.rollout.compact import CompactError, RunTasks, expand_record
from palaestra.rollout.journal import Written
from palaestra.rollout.journal_read import read_written


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
    ``rows`` their summary rows, read tolerantly, one per record with its effective flag (what the report
    lists); ``counted`` the rows of the records that are Rollouts (what metrics count); ``rollouts`` the
    records validated as Rollouts where a Rollout itself is needed (``read_run_journal``); ``problems``
    the lines that are not JSON records and ``invalid`` the records that are JSON but not Rollouts, each
    naming its line. Expanded records are not kept: holding them beside ``records`` cost 15 MB more peak
    RSS on a 2,000-rollout run for ~0.01 ms of CPU per rollout, so the report expands again what it renders.
    ``kept_from``: the index of the first record taken from what the journal kept as it wrote them
    (``read_run_journal``'s ``written``), None when every record was parsed."""

    records: list[dict[str, Any]] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    counted: list[Row] = field(default_factory=list)
    rollouts: list[Rollout] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    kept_from: int | None = None


def has_metrics_hook(env_name: str) -> bool:
    """Whether ``env_name``'s environment computes metrics of its own (``Environment.metrics``), which read
    Rollouts; False for one that cannot be loaded (``env_metrics`` says so by name)."""
    try:
        return load_env_class(env_name).metrics is not Environment.metrics
    except Exception:
        return False


def _needs_rollout(record: dict[str, Any], hooks: dict[str, bool]) -> bool:
    """Whether metrics read this record as a Rollout: its environment's own metrics hook reads Rollouts, and
    the token-fidelity summary reads the token ids of a model that returned them. ``hooks`` caches
    ``has_metrics_hook`` for one read."""
    env = record.get("env")
    if type(env) is str:
        hook = hooks.get(env)
        if hook is None:
            hook = hooks[env] = has_metrics_hook(env)
        if hook:
            return True
    traj = record.get("trajectory")
    calls = traj.get("model_calls") if type(traj) is dict else None
    return type(calls) is list and any(type(c) is dict and c.get("generation_token_ids") for c in calls)


def read_run_journal(path: Path, *, on_expanded: Callable[[int, dict[str, Any]], None] | None = None,
                     every_rollout: bool = False, written: Written | None = None) -> JournalRead:
    """Read the journal at ``path`` once: every record parsed, expanded and checked (a record read back is
    always checked; none is trusted for having been written by this process).

    The check is of what the numbers are read from. A record whose ids, outcome, verdict, counts, timings
    and tags have exactly the JSON types a Rollout writes (``metrics.rows.counted_row``: every record the
    journal itself wrote) counts as its row, without building a Rollout of it: that validation was a
    fifth of the end of a single-turn run. Any other record is validated as a Rollout, as are the records
    a Rollout is needed of (``_needs_rollout``, or all of them with ``every_rollout``: reverify re-scores
    Rollouts), and counts only if it is one.

    ``on_expanded(seq, record)`` sees each record that expands, with its index in ``records``, before the
    expanded form is dropped: the end of a run encodes report transcripts there instead of expanding
    every record a second time.

    ``written``: what the Journal that wrote this run's last records kept of them (the end of a run
    passes its collector's). If the file holds exactly the bytes it wrote them as, those records are taken
    as kept, not parsed (``rollout.journal_read.read_written``: a fifth of the end of a single-turn run), and
    expanded only where a Rollout of them is needed; their rows are checked all the same, and
    ``on_expanded`` does not see them (their writer saw them in full already)."""
    lines: list[int] = []
    records, problems, kept_from = read_written(path, written, missing_ok=True, lines=lines)
    out = JournalRead(records=records, problems=problems, kept_from=kept_from)
    kept_seqs = range(0)  # the records taken from ``written``
    if kept_from is not None and written is not None:
        kept_seqs = range(kept_from, kept_from + len(written.records))
    tasks = RunTasks(path.parent / rundir.TASKS)  # compact records reference their task's input
    effective = Effective()
    hooks: dict[str, bool] = {}
    for seq, (lineno, r) in enumerate(zip(lines, records, strict=True)):
        row = counted_row(seq, r)
        shown = row if row is not None else row_from_record(seq, r)  # the report lists every record
        effective.add(shown)
        out.rows.append(shown)
        kept = seq in kept_seqs
        if kept and row is not None and not every_rollout and not _needs_rollout(r, hooks):
            out.counted.append(row)  # written by this run as a Rollout, found byte for byte in the file
            continue
        try:
            full = expand_record(r, tasks)
        except CompactError as exc:
            out.invalid.append(f"{path}:{lineno}: cannot be expanded ({exc}); line skipped")
            continue
        if on_expanded is not None and not kept:
            on_expanded(seq, full)
        if row is not None and not every_rollout and not _needs_rollout(full, hooks):
            out.counted.append(row)
            continue
        try:
            rollout = Rollout.model_validate(full)
        except ValueError as exc:
            out.invalid.append(f"{path}:{lineno}: not a Rollout ({rollout_problem(exc)}); line skipped")
            continue
        out.rollouts.append(rollout)
        out.counted.append(row if row is not None else row_from_rollout(seq, rollout))
    return out


def read_rollouts(path: Path) -> tuple[list[dict[str, Any]], list[Rollout], list[str], list[str]]:
    """The journal's records, its valid Rollouts, the lines that are not JSON records (torn, garbage), and
    the records that are JSON but not Rollouts — each problem naming its line, so none is dropped
    silently."""
    read = read_run_journal(path, every_rollout=True)
    return read.records, read.rollouts, read.problems, read.invalid


def env_metrics(envs: Iterable[str], rollouts: list[Rollout]) -> dict[str, Any]:
    """Each environment's own metrics hook (``Environment.metrics``), over its Rollouts among ``rollouts``;
    ``envs`` are the environments the counted records name. One that cannot be loaded is named with why."""
    out: dict[str, Any] = {}
    for name in sorted(set(envs)):
        try:
            cls = load_env_class(name)
            if cls.metrics is Environment.metrics:
                continue
            extra = cls().metrics([r for r in rollouts if r.env == name])
        except Exception as exc:  # a buggy hook must not cost the run its metrics
            extra = {"error": f"{type(exc).__name__}: {exc}"}
        if extra:
            out[name] = extra
    return out
