"""The run journal ``rollouts.jsonl``: append-only JSONL, fsynced before an append is acknowledged.

Resume trusts the journal completely, so it must never claim a record that is not durably on disk, and a
crash at any instant must leave whole records. Group commit makes that cheap: ``append`` queues its line
and waits; one background task writes everything queued with one ``write`` and one ``fsync`` (in a worker
thread, so the loop keeps running), then acknowledges the batch, so thousands of records per second cost
tens of fsyncs. A failed write or fsync truncates back to the last acknowledged byte and fails the whole
batch with ``JournalError``; a crash mid-write leaves at most a torn last line, which ``journal_read.read_journal``
drops and ``repair`` (run by ``open``) cuts off. An exclusive ``flock`` keeps a second writer out.
"""

from __future__ import annotations

import asyncio
import errno as errno_mod
import fcntl
import json
import os
import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from palaestra.core.errors import PalaestraError

__all__ = ["KEEP_BYTES", "Journal", "JournalError", "Written", "encode_record", "repair"]

# encoded lines, the appends waiting on them, and (when the journal keeps what it wrote) their records
_Batch = list[tuple[bytes, "asyncio.Future[None]", Any]]
_RESUME_HINT = "free space or fix the disk holding the run directory, then resume the run"


class JournalError(PalaestraError):
    """A record could not be made durable; ``errno`` is the OS error number when there is one."""

    kind = "journal"

    def __init__(self, message: str, *, path: str | os.PathLike[str], errno: int | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path, self.errno = str(path), errno


def encode_record(record: Mapping[str, Any] | BaseModel) -> bytes:
    """One journal line (newline included). Raises TypeError, naming the problem, for unencodable records."""
    return _encode(record)[0]


def _encode(record: Mapping[str, Any] | BaseModel) -> tuple[bytes, bool]:
    """``encode_record``'s line, and whether it is ``record`` itself as JSON (a dict no text of which had to
    be replaced), so that parsing it gives ``record`` back."""
    obj: Any = record.model_dump(mode="json", exclude_none=False) if isinstance(record, BaseModel) else record
    if not isinstance(obj, Mapping):
        raise TypeError(f"journal records must be dicts or pydantic models, got {type(record).__name__}")
    try:
        # A right-sized copy: orjson's bytes keep its whole output buffer (8 KB for a 1.8 KB record), and
        # a line waits in the group-commit queue until its batch is fsynced; with tens of thousands of
        # rollouts finishing together that buffer slack was the largest holder of memory in flight.
        return memoryview(orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)).tobytes(), obj is record
    except TypeError as exc:  # orjson.JSONEncodeError subclasses TypeError
        if "surrogates" in str(exc):  # text no UTF-8 can hold (a lone surrogate): replaced, so nothing is lost
            fixed = json.loads(json.dumps(obj, ensure_ascii=False).encode("utf-8", "replace"))
            return orjson.dumps(fixed, option=orjson.OPT_APPEND_NEWLINE), False
        raise TypeError(f"journal record is not JSON-serialisable: {exc}; use plain JSON types") from exc


# What a keeping Journal holds at most, in bytes of the lines it wrote (~18,000 single-turn records; their
# dicts take about four times as much memory): beyond it, the rest of a long run is parsed back at its
# end, so a run of any length holds no more than this while it collects.
KEEP_BYTES = 32 << 20


@dataclass
class Written:
    """What one open Journal appended, kept so the end of a run need not parse its own records back.

    ``records`` are the records as appended, in file order, from byte ``start`` (the journal's end when it
    was opened); ``size`` and ``crc`` are the length and CRC-32 of the bytes they were written as. A reader
    that finds exactly those bytes there (``journal_read.read_written``) takes the records as what
    parsing them would give: the bytes are the records' own encoding, checked, not trusted. Once the
    lines reach ``budget`` bytes no more are kept (``full``): the lines after them are parsed as any
    other. ``intact`` is False once a batch failed or lines were appended that the journal did not
    encode (``append_lines``): then nothing here is to be used."""

    start: int
    budget: int = KEEP_BYTES
    size: int = 0
    crc: int = 0
    records: list[Any] = field(default_factory=list)
    intact: bool = True
    full: bool = False

    def add(self, data: bytes, batch: _Batch) -> None:
        if self.intact and any(record is None for _, _, record in batch):
            self.intact = False
        if not self.intact:
            self.records.clear()
            return
        if self.full or self.size + len(data) > self.budget:
            self.full = True  # later batches follow in the file: they are read back from it
            return
        self.records.extend(record for _, _, record in batch)
        self.size += len(data)
        self.crc = zlib.crc32(data, self.crc)


def _os_error(action: str, path: Path, exc: OSError, hint: str = _RESUME_HINT) -> JournalError:
    code = errno_mod.errorcode.get(exc.errno or 0, str(exc.errno))
    return JournalError(f"{action} journal {path}: [{code}] {exc.strerror or exc}", path=path,
                        errno=exc.errno, hint=hint)


def _rfind_newline(fd: int, pos: int) -> int:
    """Offset of the last newline before ``pos``, or -1; reads backwards in blocks: journals can be huge."""
    while pos > 0:
        start = max(0, pos - 65536)
        i = os.pread(fd, pos - start, start).rfind(b"\n")
        if i >= 0:
            return start + i
        pos = start
    return -1


def _repair_fd(fd: int, path: Path) -> list[str]:
    """Cut a torn tail: bytes after the last newline, then any trailing lines that are not valid JSON."""
    size = os.fstat(fd).st_size
    problems: list[str] = []
    end = _rfind_newline(fd, size) + 1
    if end != size:
        problems.append(f"{path}: dropped a torn last line of {size - end} bytes at byte {end} (no trailing "
                        "newline: a crash interrupted its append, so it was never acknowledged)")
    while end > 0:
        start = _rfind_newline(fd, end - 1) + 1
        line = os.pread(fd, end - start, start)
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError:
            if line.strip():  # a blank line is harmless: readers skip it
                problems.append(f"{path}: dropped an invalid last line ({end - start} bytes at byte "
                                f"{start}): left by a crash, never acknowledged")
                end = start
                continue
        break
    if end != size:
        os.ftruncate(fd, end)
        os.fsync(fd)
    return problems


def _lock(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise JournalError(f"journal {path} is already open for writing by another process or Journal",
                           path=path, hint="stop the other run in this directory or pick another") from None


def repair(path: str | os.PathLike[str]) -> list[str]:
    """Truncate a torn tail so appends continue on a clean line boundary; returns what was dropped."""
    p, fd = Path(path), os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        _lock(fd, p)
        return _repair_fd(fd, p)
    finally:
        os.close(fd)


class Journal:
    """Append-only, fsynced JSONL journal with group commit. Use ``async with Journal(path) as j``.

    ``keep``: hold the appended records in ``written`` (``Written``, up to ``keep_bytes`` of their lines),
    so the end of a run reads its own records back without parsing them; a caller must then not change
    a record after appending it."""

    def __init__(self, path: str | os.PathLike[str], *, keep: bool = False, keep_bytes: int = KEEP_BYTES) -> None:
        self.path = Path(path)
        self.keep, self.keep_bytes = keep, keep_bytes
        self.written: Written | None = None  # with ``keep``: what this open journal appended
        self._appended = 0
        self.fsyncs = self.records_written = 0
        self.repairs: list[str] = []
        self._fd: int | None = None
        self._offset = 0  # end of the last acknowledged record: where a failed write is rolled back to
        self._pending: _Batch = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self._broken: str | None = None  # set when a rollback failed: the file's tail is then unknown
        self._io_lock = threading.Lock()  # a cancelled writer's thread may still be writing: close after it

    async def open(self) -> Journal:
        if self._fd is not None:
            raise JournalError(f"journal {self.path} is already open", path=self.path)
        self._fd, self._offset, self.repairs = await asyncio.to_thread(self._open_sync)
        self.written = Written(self._offset, self.keep_bytes) if self.keep else None
        self._appended = 0
        self._closing, self._broken, self._wake = False, None, asyncio.Event()
        self._writer = asyncio.create_task(self._run_writer(), name=f"journal-writer:{self.path.name}")
        return self

    def _open_sync(self) -> tuple[int, int, list[str]]:
        created, fd = not self.path.exists(), -1
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)
            _lock(fd, self.path)
            repairs = _repair_fd(fd, self.path)
            if created:  # make the new directory entry itself durable
                dir_fd = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            return fd, os.fstat(fd).st_size, repairs
        except BaseException as exc:
            if fd >= 0:
                os.close(fd)
            if isinstance(exc, OSError):
                raise _os_error("cannot open", self.path, exc, "check that the run directory is writable "
                                "and its disk healthy") from exc
            raise

    async def append(self, record: Mapping[str, Any] | BaseModel, *, line: bytes | None = None) -> int:
        """Return once the record is written and fsynced; raise JournalError if it could not be. Returns the
        record's index among those appended since the journal opened (its order in the file, while every
        batch is written: ``written.intact``). ``line``: the record already encoded, exactly as
        ``encode_record(record)`` encodes it (``rollout.plain.plain_line``), so it is not encoded again."""
        if self._broken is not None:
            raise JournalError(self._broken, path=self.path, hint=_RESUME_HINT)
        if self._fd is None or self._closing or self._writer is None or self._writer.done():
            raise JournalError(f"journal {self.path} is not open", path=self.path,
                               hint="call `await journal.open()` (or use `async with Journal(path)`) first")
        line, exact = (line, True) if line is not None else _encode(record)
        fut = asyncio.get_running_loop().create_future()
        kept = None
        if self.written is not None:  # kept as the dict a reader would parse from ``line``
            kept = record if exact and type(record) is dict else orjson.loads(line)
        del record  # otherwise the caller's record (often a temporary dict) need not live until the fsync
        self._pending.append((line, fut, kept))
        index, self._appended = self._appended, self._appended + 1
        self._wake.set()
        await fut
        return index

    async def append_lines(self, lines: list[bytes]) -> None:
        """Append records already encoded elsewhere (by ``encode_record``, one JSON object and its newline
        each), all in one group commit: what a writer that journals for other processes appends, so it
        neither decodes nor re-encodes them. Returns once all are fsynced; raises JournalError if not."""
        if self._broken is not None:
            raise JournalError(self._broken, path=self.path, hint=_RESUME_HINT)
        if self._fd is None or self._closing or self._writer is None or self._writer.done():
            raise JournalError(f"journal {self.path} is not open", path=self.path,
                               hint="call `await journal.open()` (or use `async with Journal(path)`) first")
        if not lines:
            return
        fut = asyncio.get_running_loop().create_future()
        self._pending.extend((line, fut, None) for line in lines)
        self._appended += len(lines)  # one batch: the writer takes all of _pending at once
        self._wake.set()
        await fut

    async def close(self) -> None:
        """Flush everything queued, stop the writer and release the file."""
        if self._fd is None:
            return
        self._closing = True
        self._wake.set()
        try:
            if self._writer is not None:
                await self._writer  # concurrent closers all wait for the same final flush
        finally:
            with self._io_lock:
                if self._fd is not None:
                    os.close(self._fd)
                self._fd, self._writer = None, None

    async def __aenter__(self) -> Journal:
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _run_writer(self) -> None:
        try:
            while True:
                if not self._pending:
                    if self._closing:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                batch, self._pending = self._pending, []
                await self._commit(batch)
        finally:  # cancelled or crashed: nobody may wait forever on an append that will never be written
            self._fail(self._pending, f"journal {self.path} writer stopped before these records were written")
            self._pending = []

    async def _commit(self, batch: _Batch) -> None:
        data = b"".join(line for line, _, _ in batch)
        try:
            await asyncio.to_thread(self._write_sync, data)
        except JournalError as exc:
            self._fail(batch, exc.message, exc.errno)
            return
        except BaseException as exc:  # cancelled or unexpected: stop, but never leave an append hanging
            self._broken = f"journal {self.path} writer stopped ({exc!r}); durability of its batch is unknown"
            self._fail(batch, self._broken)
            raise
        self.fsyncs, self.records_written = self.fsyncs + 1, self.records_written + len(batch)
        if self.written is not None:
            self.written.add(data, batch)
        for _, fut, _ in batch:
            if not fut.done():  # the caller may have been cancelled; the record is durable all the same
                fut.set_result(None)

    def _fail(self, batch: _Batch, msg: str, errno: int | None = None) -> None:
        if batch and self.written is not None:
            self.written.intact = False  # a failed batch: the file no longer follows the order of appends
        for _, fut, _ in batch:
            if not fut.done():
                fut.set_exception(JournalError(msg, path=self.path, errno=errno, hint=_RESUME_HINT))

    def _write_sync(self, data: bytes) -> None:
        """Write and fsync ``data``; on failure roll the file back to the last acknowledged byte."""
        with self._io_lock:
            self._write_locked(data)

    def _write_locked(self, data: bytes) -> None:
        fd, good = self._fd, self._offset
        if fd is None:  # pragma: no cover - only after a cancelled writer
            raise JournalError(f"journal {self.path} was closed before this batch was written",
                               path=self.path)
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                n = os.write(fd, view[done:])
                if n <= 0:
                    raise OSError(errno_mod.EIO, "write returned 0 bytes")
                done += n
            os.fsync(fd)
        except OSError as exc:
            n_records = data.count(b"\n")
            err = _os_error(f"could not append {n_records} record(s) to", self.path, exc)
            try:
                os.ftruncate(fd, good)
                os.fsync(fd)
            except OSError as exc2:
                self._broken = (f"journal {self.path} may hold a partial record after a failed append "
                                f"({err.message}) and could not be truncated back to byte {good} "
                                f"({exc2.strerror}); no further appends are accepted")
                raise JournalError(self._broken, path=self.path, errno=exc.errno) from exc
            raise err from exc
        self._offset = good + len(data)
