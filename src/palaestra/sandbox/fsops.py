"""File operations on a box's host directory that a sandboxed program cannot turn against the host.

The runtime (often root) reads and writes files that untrusted code controls. A planted symlink
(``out.txt -> /etc/shadow``) or a FIFO must never make it read, write or block on anything outside the
box, so every path is walked one component at a time with ``O_NOFOLLOW`` relative to directory fds,
and only regular files are read."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator


def split_rel(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise ValueError(f"path {rel!r} must name a file inside the sandbox (no '..')")
    return parts


def _open_dir(parent_fd: int, name: str, *, create: bool, owner: tuple[int, int] | None) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=parent_fd)
    fd = os.open(name, flags, dir_fd=parent_fd)
    if owner is not None:
        os.fchown(fd, *owner)
    return fd


def _walk_to_parent(root: str, parts: list[str], *, create: bool, owner: tuple[int, int] | None) -> int:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            nxt = _open_dir(fd, name, create=create, owner=owner)
            os.close(fd)
            fd = nxt
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, NotADirectoryError) or exc.errno == 40:  # ELOOP: a symlink in the way
            raise ValueError(f"'{'/'.join(parts)}': a parent is not a directory (or is a symlink)") from None
        raise
    return fd


def write_file(root: str, rel: str, data: bytes, *, mode: int = 0o644, owner: tuple[int, int] | None = None) -> None:
    """Create or replace ``root/rel``; an existing symlink or special file there is replaced, never followed."""
    parts = split_rel(rel)
    dfd = _walk_to_parent(root, parts, create=True, owner=owner)
    try:
        name = parts[-1]
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(f"'{rel}' is a directory")
            if not stat.S_ISREG(st.st_mode):
                os.unlink(name, dir_fd=dfd)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     mode, dir_fd=dfd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"'{rel}' is not a regular file")
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def _read_fd(fd: int, rel: str, max_bytes: int) -> bytes:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"'{rel}' is not a regular file")
    if st.st_size > max_bytes:
        raise ValueError(f"'{rel}' is {st.st_size} bytes, over the {max_bytes}-byte limit")
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        total += len(chunk)
        if total > max_bytes:
            raise ValueError(f"'{rel}' grew past the {max_bytes}-byte limit while being read")
        chunks.append(chunk)
    return b"".join(chunks)


def read_file(root: str, rel: str, *, max_bytes: int) -> bytes:
    parts = split_rel(rel)
    dfd = _walk_to_parent(root, parts, create=False, owner=None)
    try:
        try:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == 40:
                raise ValueError(f"'{rel}' is a symlink; only regular files are read") from None
            raise
        try:
            return _read_fd(fd, rel, max_bytes)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)


def walk_files(root: str, rel: str, *, max_bytes: int, max_files: int) -> dict[str, bytes]:
    """Every regular file below ``root/rel`` (symlinks and special files skipped)."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise ValueError(f"path {rel!r} must stay inside the sandbox")
    if parts:
        pfd = _walk_to_parent(root, parts + ["x"], create=False, owner=None)
    else:
        pfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    out: dict[str, bytes] = {}
    total = 0
    try:
        for prefix, dirfd, entries in _fwalk(pfd, ""):
            for name, st in entries:
                if not stat.S_ISREG(st.st_mode):
                    continue
                try:
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
                except OSError:
                    continue
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        continue
                    data = _read_fd(fd, prefix + name, max_bytes - total)
                finally:
                    os.close(fd)
                total += len(data)
                out[prefix + name] = data
                if len(out) > max_files:
                    raise ValueError(f"more than {max_files} files under '{rel or '.'}'")
    finally:
        os.close(pfd)
    return out


def _fwalk(dirfd: int, prefix: str, depth: int = 0) -> Iterator[tuple[str, int, list[tuple[str, os.stat_result]]]]:
    """Every entry below ``dirfd`` with its lstat, one directory at a time, never following a link; the
    caller reads through ``dirfd``, so a path swapped for a symlink meanwhile cannot redirect it."""
    if depth > 64:
        raise ValueError("directory tree deeper than 64 levels")
    entries: list[tuple[str, os.stat_result]] = []
    for entry in sorted(os.listdir(dirfd)):
        try:
            entries.append((entry, os.stat(entry, dir_fd=dirfd, follow_symlinks=False)))
        except OSError:
            continue
    yield prefix, dirfd, entries
    for name, st in entries:
        if not stat.S_ISDIR(st.st_mode):
            continue
        try:
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        except OSError:
            continue
        try:
            yield from _fwalk(sub, f"{prefix}{name}/", depth + 1)
        finally:
            os.close(sub)

