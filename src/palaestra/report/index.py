"""An incremental index over ``rollouts.jsonl``: byte offsets and summary rows, built once, read by page.

The viewer must show the first page of a 100,000-rollout journal at once and keep up with a run that is
still appending, so the journal is never loaded whole. ``advance`` reads forward from where it stopped
and consumes only newline-terminated lines (a line still being appended is left for the next call); a
record is fetched again by ``pread`` at its offset when someone opens it, and expanded against the run's
``tasks.jsonl`` (records reference their task's input instead of copying it: rollout/compact.py). All
methods are thread-safe: the server advances the index in a background thread while requests read it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from palaestra.metrics.rows import Effective, Row, row_from_record
from palaestra.report.rows import Filter
from palaestra.rollout.compact import RunTasks, expand_record

__all__ = ["JournalIndex"]

_CHUNK = 1 << 20


class JournalIndex:
    """Offsets and rows of every valid record in a journal, in journal order (``seq`` = position)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.offsets = array("q")
        self.lengths = array("q")
        self.rows: list[Row] = []
        self.problems: list[str] = []
        self.pos = 0  # bytes consumed: everything before this offset is indexed
        self.size = 0  # file size when last looked at
        self.version = 0  # bumped whenever rows are added or the index is reset
        self._effective = Effective()
        self._lines = 0
        self._lock = threading.RLock()
        self._tasks = RunTasks(self.path.parent / "tasks.jsonl")  # read only when a record references it

    @property
    def complete(self) -> bool:
        """True when every whole line present at the last look has been indexed."""
        return self.pos >= self.size

    def reset(self) -> None:
        with self._lock:
            self.offsets, self.lengths, self.rows, self.problems = array("q"), array("q"), [], []
            self.pos = self.size = self._lines = 0
            self._effective = Effective()
            self.version += 1

    def advance(self, max_records: int | None = None, deadline: float | None = None) -> bool:
        """Index new whole lines; stop early after ``max_records`` or at ``deadline`` (time.monotonic()).

        Returns True when the index has caught up with the file. A file that shrank (a journal repair cut a
        torn tail, or the run directory was replaced) is indexed again from the start.
        """
        with self._lock:
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size < self.pos:
                self.reset()
            self.size = size
            if self.pos >= size:
                return True
            added = 0
            with self.path.open("rb") as fh:
                while self.pos < self.size:
                    if (max_records is not None and added >= max_records) or (
                            deadline is not None and time.monotonic() >= deadline):
                        break
                    n = self._read_block(fh, None if max_records is None else max_records - added)
                    if n < 0:
                        break  # only a partial (still being written) line is left
                    added += n
            if added:
                self.version += 1
            return self.pos >= self.size

    def _read_block(self, fh: Any, limit: int | None) -> int:
        """Index whole lines from ``self.pos``; -1 when no whole line is available yet."""
        fh.seek(self.pos)
        want = _CHUNK
        while True:
            data = fh.read(want)
            end = data.rfind(b"\n")
            if end >= 0:
                break
            if self.pos + len(data) >= self.size:
                self.size = self.pos  # a torn or in-progress tail: not ours to read yet
                return -1
            want *= 4  # one line longer than the chunk: read more
        start, added = 0, 0
        while start <= end and (limit is None or added < limit):
            nl = data.index(b"\n", start)
            line = data[start:nl]
            offset = self.pos + start
            start = nl + 1
            self._lines += 1
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                self.problems.append(f"{self.path}:{self._lines}: invalid JSON ({exc}); line skipped")
                continue
            if not isinstance(rec, dict):
                self.problems.append(f"{self.path}:{self._lines}: not a JSON object; line skipped")
                continue
            row = row_from_record(len(self.rows), rec)
            self.offsets.append(offset)
            self.lengths.append(len(line))
            self.rows.append(row)
            self._effective.add(row)
            added += 1
        self.pos += start
        return added

    def ensure(self, n_records: int, timeout_s: float = 10.0) -> None:
        """Index at least ``n_records`` records (or up to the end of the file), reading no further."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                missing = n_records - len(self.rows)
                if missing <= 0 or self.advance(max_records=missing, deadline=deadline):
                    return
                if time.monotonic() >= deadline:
                    return

    def _span(self, seq: int) -> tuple[int, int] | None:
        """(offset, length) of record ``seq`` in the journal, or None when the index has no such record."""
        with self._lock:
            if not 0 <= seq < len(self.rows):
                return None
            return self.offsets[seq], self.lengths[seq]

    def _expand(self, rec: dict[str, Any]) -> dict[str, Any]:
        """The record whole; a task missing from tasks.jsonl reads as a placeholder that says so (a
        viewer shows what it can rather than nothing)."""
        return expand_record(rec, self._tasks, strict=False)

    def read_record(self, seq: int) -> dict[str, Any]:
        """The full journal record number ``seq``, expanded; IndexError when the index has no such record."""
        span = self._span(seq)
        if span is None:
            raise IndexError(f"no rollout #{seq} in {self.path} (it has {len(self.rows)} indexed)")
        with self.path.open("rb") as fh:
            data = os.pread(fh.fileno(), span[1], span[0])
        rec: dict[str, Any] = orjson.loads(data)
        return self._expand(rec) if isinstance(rec, dict) else rec

    def read_records(self, seqs: Iterable[int], *, expand: bool = True
                     ) -> Iterator[tuple[int, dict[str, Any] | None]]:
        """``(seq, record)`` for each seq, through one open file (a report reads thousands in a row);
        the record is None for a seq the index does not hold or a line that no longer parses. The index
        lock is never held while the caller runs between two records. ``expand=False`` gives records as
        journaled (enough for usage and outcomes, which compaction never touches)."""
        with self.path.open("rb") as fh:
            for seq in seqs:
                span = self._span(seq)
                rec = None
                if span is not None:
                    with contextlib.suppress(orjson.JSONDecodeError):
                        rec = orjson.loads(os.pread(fh.fileno(), span[1], span[0]))
                if not isinstance(rec, dict):
                    rec = None
                elif expand:
                    rec = self._expand(rec)
                yield seq, rec

    def snapshot(self) -> list[Row]:
        """The rows indexed so far (a copy of the list; rows themselves are shared)."""
        with self._lock:
            return list(self.rows)

    def query(self, flt: Filter, offset: int = 0, limit: int = 50) -> tuple[list[Row], int]:
        """One page of rows matching ``flt`` and how many match in all (of those indexed)."""
        if flt.empty:
            with self._lock:
                return self.rows[offset:offset + limit], len(self.rows)
        matched = flt.apply(self.snapshot())
        return matched[offset:offset + limit], len(matched)

    def tasks(self) -> list[str]:
        with self._lock:
            return sorted({r.task_id for r in self.rows})

    def follow(self, stop: threading.Event, *, batch: int = 2000, poll_s: float = 1.0) -> None:
        """Index to the end, then keep watching the file for appends until ``stop`` is set.

        Small batches keep the lock free between them, so a page request never waits long behind the
        background indexing of a huge journal.
        """
        while not stop.is_set():
            done = self.advance(max_records=batch)
            if done:
                stop.wait(poll_s)
            else:
                time.sleep(0)  # let request threads take the lock between batches
