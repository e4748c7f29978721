"""Tar in and out of a box's host directory, with the same rule as ``fsops``: never follow a link.

Tar is how a sandbox's working directory moves between sandboxes (the ``terminal`` environment grades
a fresh copy of the agent's files): it keeps modes, empty directories and symlinks, which a plain
file map would lose."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tarfile

from palaestra.sandbox.fsops import _fwalk, _read_fd, _walk_to_parent, write_file


def tar_tree(root: str, rel: str, *, max_bytes: int, max_files: int) -> bytes:
    """A tar of a box directory: regular files (with their modes), directories (even empty ones) and
    symlinks (stored, never followed). Special files are skipped."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise ValueError(f"path {rel!r} must stay inside the sandbox")
    pfd = (_walk_to_parent(root, parts + ["x"], create=False, owner=None) if parts
           else os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    buf = io.BytesIO()
    total = count = 0
    try:
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for prefix, dirfd, names in _fwalk(pfd, ""):
                for name, st in names:
                    count += 1
                    if count > max_files:
                        raise ValueError(f"more than {max_files} entries under '{rel or '.'}'")
                    info = tarfile.TarInfo(prefix + name)
                    info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
                    if stat.S_ISDIR(st.st_mode):
                        info.type = tarfile.DIRTYPE
                        tar.addfile(info)
                    elif stat.S_ISLNK(st.st_mode):
                        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=dirfd)
                        tar.addfile(info)
                    elif stat.S_ISREG(st.st_mode):
                        try:
                            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
                        except OSError:
                            continue
                        try:
                            data = _read_fd(fd, prefix + name, max_bytes - total)
                        finally:
                            os.close(fd)
                        total += len(data)
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
    finally:
        os.close(pfd)
    return buf.getvalue()


def untar_into(root: str, rel: str, data: bytes, *, owner: tuple[int, int] | None) -> None:
    """Unpack a tar below ``root/rel`` without ever following a link: names with ``..`` or a leading
    ``/`` are refused, symlinks are recreated as symlinks, hard links and devices are skipped."""
    base = [p for p in rel.split("/") if p not in ("", ".")]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar:
            parts = base + [p for p in member.name.split("/") if p not in ("", ".")]
            if member.name.startswith("/") or ".." in parts:
                raise ValueError(f"archive member {member.name!r} points outside the sandbox")
            if not parts:
                continue
            target = "/".join(parts)
            if member.isdir():
                dfd = _walk_to_parent(root, parts + ["x"], create=True, owner=owner)
                os.close(dfd)
            elif member.isfile():
                fh = tar.extractfile(member)
                write_file(root, target, fh.read() if fh else b"", mode=member.mode & 0o777, owner=owner)
            elif member.issym():
                dfd = _walk_to_parent(root, parts, create=True, owner=owner)
                try:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(parts[-1], dir_fd=dfd)
                    os.symlink(member.linkname, parts[-1], dir_fd=dfd)
                    if owner is not None:
                        os.chown(parts[-1], *owner, dir_fd=dfd, follow_symlinks=False)
                finally:
                    os.close(dfd)
