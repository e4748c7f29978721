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
    """``read_journal`` of a journal appended to by a Journal that kept its records (``written``). When the
    file holds, from where that Journal started, exactly the bytes it wrote them as (same length and
    CRC-32), those records are taken as kept instead of parsed; the lines before them (an earlier
    session's) and after them (the rest of a run too long to keep whole, or lines appended since) are
    parsed. Otherwise the whole file is. The third value is the index of the first record taken from
    ``written`` (None: none was)."""
    p = Path(path)
    if missing_ok and not p.exists():
        return [], [], None
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    with p.open("rb") as f:
        size = _kept_size(f, written)
        if written is None or size is None:
            _read_lines(f, p, records, problems, lines)
            return records, problems, None
        end = written.start + written.size
        n_lines = _read_lines(f, p, records, problems, lines, end=written.start, more=size > written.start)
        first = len(records)
        records.extend(written.records)
        if lines is not None:
            lines.extend(range(n_lines + 1, n_lines + 1 + len(written.records)))
        if size > end:
            f.seek(end)
            _read_lines(f, p, records, problems, lines, first_line=n_lines + len(written.records) + 1)
    return records, problems, first


def _kept_size(f: Any, written: Written | None) -> int | None:
    """The size of the file ``f`` if it holds the bytes ``written`` describes where it says, else None;
    ``f`` is left at its start."""
    if written is None or not written.intact:
        return None
    size = os.fstat(f.fileno()).st_size
    if size < written.start + written.size:
        return None
    f.seek(written.start)
    crc, left = 0, written.size
    while left > 0 and (chunk := f.read(min(left, 1 << 20))):
        crc, left = zlib.crc32(chunk, crc), left - len(chunk)
    f.seek(0)
    return size if left == 0 and crc == written.crc else None


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
                *, end: int | None = None, more: bool = False, first_line: int = 1) -> int:
    """Parse the lines of ``f`` from where it is (up to byte ``end``) into ``records``, numbering them from
    ``first_line``; returns the number of the last line read (``first_line - 1`` for none). ``more``:
    lines follow ``end``, so an invalid last line before it is no torn tail."""
    bad: tuple[int, str] | None = None  # an invalid line is "torn" only if no other line follows it
    lineno = first_line - 1
    for lineno, raw in enumerate(f if end is None else _upto(f, end), first_line):
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
