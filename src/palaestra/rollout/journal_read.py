"""Reading the run journal back (``rollout/journal.py`` writes it): every whole record, every line that is
not one named with why, and (``read_written``) the records a Journal kept of what it appended, taken from
memory when the file holds exactly their bytes."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from palaestra.rollout.journal import Written

__all__ = ["read_journal", "read_written"]


def read_journal(path: str | os.PathLike[str], *, missing_ok: bool = False,
                 lines: list[int] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """All whole records, plus a description of every line that was dropped and why. When ``lines`` is
    given, the line number of each record is appended to it (so a caller can name the line of a record
    it rejects later, e.g. one that is JSON but not a Rollout).

    A torn or invalid *last* line is what a crash leaves behind and is dropped as unacknowledged; an
    invalid line elsewhere means the file was damaged or edited, and is skipped with its line number.
    """
    records, problems, _ = read_written(path, None, missing_ok=missing_ok, lines=lines)
    return records, problems


def read_written(path: str | os.PathLike[str], written: Written | None, *, missing_ok: bool = False,
                 lines: list[int] | None = None) -> tuple[list[dict[str, Any]], list[str], int | None]:
    """``read_journal`` of a journal whose tail ``written`` describes (what the Journal that appended it
    kept). When the file ends with exactly the bytes that Journal wrote (same length and CRC-32), those
    records are taken as kept instead of parsed, and only the lines before them are read; otherwise the
    whole file is read. The third value is the index of the first record taken from ``written`` (None:
    none was)."""
    p = Path(path)
    if missing_ok and not p.exists():
        return [], [], None
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    with p.open("rb") as f:
        tail = _written_tail(f, written)
        if tail is None:
            _read_lines(f, p, records, problems, lines)
            return records, problems, None
        n_lines = _read_lines(f, p, records, problems, lines, end=tail.start, more=bool(tail.records))
    first = len(records)
    records.extend(tail.records)
    if lines is not None:
        lines.extend(range(n_lines + 1, n_lines + 1 + len(tail.records)))
    return records, problems, first


def _written_tail(f: Any, written: Written | None) -> Written | None:
    """``written`` if the file ``f`` ends with exactly the bytes it describes, else None; ``f`` is left at
    its start."""
    if written is None or not written.intact:
        return None
    size = os.fstat(f.fileno()).st_size
    if size != written.start + written.size:
        return None
    f.seek(written.start)
    crc = 0
    while chunk := f.read(1 << 20):
        crc = zlib.crc32(chunk, crc)
    f.seek(0)
    return written if crc == written.crc else None


def _upto(f: Any, end: int) -> Iterator[bytes]:
    """The lines of ``f`` up to byte ``end`` (a line boundary)."""
    pos = 0
    while pos < end:
        raw = f.readline()
        if not raw:
            return
        pos += len(raw)
        yield raw


def _read_lines(f: Any, p: Path, records: list[dict[str, Any]], problems: list[str], lines: list[int] | None,
                *, end: int | None = None, more: bool = False) -> int:
    """Parse the lines of ``f`` (up to byte ``end``) into ``records``; returns how many lines it read.
    ``more``: lines follow ``end``, so an invalid last line before it is no torn tail."""
    bad: tuple[int, str] | None = None  # an invalid line is "torn" only if no other line follows it
    lineno = 0
    for lineno, raw in enumerate(f if end is None else _upto(f, end), 1):
        blank = raw.isspace() or not raw  # (not raw.strip(), without copying the line twice)
        if not blank and bad is not None:
            problems.append(f"{p}:{bad[0]}: invalid JSON ({bad[1]}); line skipped")
            bad = None
        if not raw.endswith(b"\n"):
            problems.append(f"{p}:{lineno}: torn last line ({len(raw)} bytes, no trailing newline) "
                            "dropped: a crash interrupted its append, so it was never acknowledged")
        elif not blank:
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                bad = (lineno, str(exc))
                continue
            if isinstance(obj, dict):
                records.append(obj)
                if lines is not None:
                    lines.append(lineno)
            else:
                problems.append(f"{p}:{lineno}: not a JSON object ({type(obj).__name__}); line skipped")
    if bad is not None:
        problems.append(f"{p}:{bad[0]}: invalid JSON ({bad[1]}); line skipped" if more else
                        f"{p}:{bad[0]}: torn last line (invalid JSON: {bad[1]}) dropped: left by a crash, "
                        "never acknowledged")
    return lineno
