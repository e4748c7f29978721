"""The run journal: ``rollouts.jsonl``, append-only, one JSON object per line, fsynced before acknowledging.

Resume trusts the journal completely, so it must never claim a record that is not durably on disk, and a
crash at any instant must leave a file that reads back as whole records. Hence:

* Group commit: ``append`` queues the encoded line and waits; one background task writes everything queued
  with one ``write`` and one ``fsync`` (in a worker thread, so the event loop keeps running) and then
  acknowledges the batch. Appends arriving during an fsync form the next batch: thousands of records per
  second cost tens of fsyncs.
* Clean boundaries: a failed write or fsync truncates the file back to the last acknowledged byte and fails
  every append of the batch with ``JournalError``; a crash mid-write leaves at most a torn last line, which
  ``read_journal`` reports and drops and ``repair`` (run by ``open``) cuts off.
* One writer: an exclusive ``flock`` keeps a second process resuming the same run from interleaving.
"""

from __future__ import annotations

import asyncio
import errno as errno_mod
import fcntl
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from palaestra.core.errors import PalaestraError

__all__ = ["Journal", "JournalError", "encode_record", "read_journal", "repair"]

_SCAN_BLOCK = 1 << 16
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
    obj: Any = record.model_dump(mode="json", exclude_none=False) if isinstance(record, BaseModel) else record
    if not isinstance(obj, Mapping):
        raise TypeError(f"journal records must be dicts or pydantic models, got {type(record).__name__}")
    try:
        return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError as exc:  # orjson.JSONEncodeError subclasses TypeError
        raise TypeError(f"journal record is not JSON-serialisable: {exc}; convert it to plain JSON types") from exc


def _os_error(action: str, path: Path, exc: OSError, hint: str = _RESUME_HINT) -> JournalError:
    code = errno_mod.errorcode.get(exc.errno or 0, str(exc.errno))
    return JournalError(f"{action} journal {path}: [{code}] {exc.strerror or exc}", path=path,
                        errno=exc.errno, hint=hint)


def _rfind_newline(fd: int, end: int) -> int:
    """Offset of the last b"\\n" before ``end``, or -1; reads backwards in blocks so huge journals stay cheap."""
    pos = end
    while pos > 0:
        start = max(0, pos - _SCAN_BLOCK)
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
                problems.append(f"{path}: dropped an invalid last line of {end - start} bytes at byte "
                                f"{start} (left by a crash; never acknowledged)")
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
        raise JournalError(f"journal {path} is already open for writing by another process or Journal object",
                           path=path, hint="stop the other run using this run directory, or pick another "
                           "directory; two writers would interleave records") from None


def repair(path: str | os.PathLike[str]) -> list[str]:
    """Truncate a torn tail so appends continue on a clean line boundary; returns what was dropped."""
    p = Path(path)
    fd = os.open(p, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        _lock(fd, p)
        return _repair_fd(fd, p)
    finally:
        os.close(fd)


def read_journal(path: str | os.PathLike[str], *,
                 missing_ok: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    """All whole records, plus a description of every line that was dropped and why.

    A torn or invalid *last* line is what a crash leaves behind and is dropped as unacknowledged; an
    invalid line elsewhere means the file was damaged or edited, and is skipped with its line number.
    """
    p = Path(path)
    if missing_ok and not p.exists():
        return [], []
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    bad: tuple[int, str] | None = None  # an invalid line is "torn" only if no other line follows it
    with p.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if raw.strip() and bad is not None:
                problems.append(f"{p}:{bad[0]}: invalid JSON ({bad[1]}); line skipped")
                bad = None
            if not raw.endswith(b"\n"):
                problems.append(f"{p}:{lineno}: torn last line ({len(raw)} bytes, no trailing newline) "
                                "dropped: a crash interrupted its append, so it was never acknowledged")
            elif raw.strip():
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    bad = (lineno, str(exc))
                    continue
                if isinstance(obj, dict):
                    records.append(obj)
                else:
                    problems.append(f"{p}:{lineno}: not a JSON object ({type(obj).__name__}); line skipped")
    if bad is not None:
        problems.append(f"{p}:{bad[0]}: torn last line (invalid JSON: {bad[1]}) dropped: left by a crash, "
                        "never acknowledged")
    return records, problems


class Journal:
    """Append-only, fsynced JSONL journal with group commit. Use ``async with Journal(path) as j``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.fsyncs = self.records_written = 0
        self.repairs: list[str] = []
        self._fd: int | None = None
        self._offset = 0  # end of the last acknowledged record: where a failed write is rolled back to
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False
        self._broken: str | None = None  # set when a rollback failed: the file's tail is then unknown

    async def open(self) -> Journal:
        if self._fd is not None:
            raise JournalError(f"journal {self.path} is already open", path=self.path)
        self._fd, self._offset, self.repairs = await asyncio.to_thread(self._open_sync)
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

    async def append(self, record: Mapping[str, Any] | BaseModel) -> None:
        """Return once the record is written and fsynced; raise JournalError if it could not be."""
        if self._fd is None or self._closing:
            raise JournalError(f"journal {self.path} is not open", path=self.path,
                               hint="call `await journal.open()` (or use `async with Journal(path)`) first")
        if self._broken is not None:
            raise JournalError(self._broken, path=self.path, hint=_RESUME_HINT)
        line = encode_record(record)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((line, fut))
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
                await self._writer
        finally:
            self._writer = None
            os.close(self._fd)
            self._fd = None

    async def __aenter__(self) -> Journal:  # noqa: PYI034
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

    async def _commit(self, batch: list[tuple[bytes, asyncio.Future[None]]]) -> None:
        data = b"".join(line for line, _ in batch)
        try:
            await asyncio.to_thread(self._write_sync, data)
        except BaseException as exc:  # never leave appends hanging, whatever happened
            if isinstance(exc, JournalError):
                self._fail(batch, exc.message, exc.errno)
            else:
                self._fail(batch, f"journal {self.path}: append interrupted ({exc!r}); durability unknown")
            if not isinstance(exc, Exception):
                raise
            return
        self.fsyncs += 1
        self.records_written += len(batch)
        for _, fut in batch:
            if not fut.done():  # the caller may have been cancelled; the record is durable all the same
                fut.set_result(None)

    def _fail(self, batch: list[tuple[bytes, asyncio.Future[None]]], msg: str, errno: int | None = None) -> None:
        for _, fut in batch:
            if not fut.done():
                fut.set_exception(JournalError(msg, path=self.path, errno=errno, hint=_RESUME_HINT))

    def _write_sync(self, data: bytes) -> None:
        """Write and fsync ``data``; on failure roll the file back to the last acknowledged byte."""
        fd, good = self._fd, self._offset
        assert fd is not None
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
