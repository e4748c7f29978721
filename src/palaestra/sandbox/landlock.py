"""Landlock, the unprivileged Linux LSM, for the ``process`` provider (no namespaces there).

The ruleset lets a sandboxed process read and execute only the system directories it needs plus its
own box, write only its box and the harmless character devices every ordinary program expects
(``/dev/null``, ``/dev/zero``, ``/dev/full``: a shell's ``>/dev/null`` or Python's ``os.devnull`` must
work, or the sandbox cannot run ordinary programs), make no TCP connection or bind (ABI 4+), and — ABI
6+ — signal no process and reach no abstract unix socket outside its own domain. Built with raw
syscalls through ctypes: the numbers (444-446) are the same on every architecture.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
from collections.abc import Iterable
from functools import lru_cache

from palaestra.sandbox.oslevel import IS_LINUX, PR_SET_NO_NEW_PRIVS, libc, prctl

_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446
_VERSION_FLAG = 1
_RULE_PATH_BENEATH = 1

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
_FS_ABI1 = (1 << 13) - 1
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1, 2

READ_ONLY = EXECUTE | READ_FILE | READ_DIR
# a character device: opened for reading and writing (O_TRUNC included, as ``>`` does), ioctl'ed (isatty)
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV


@lru_cache(maxsize=1)
def abi_version() -> int:
    """0 when Landlock is missing or disabled."""
    if not IS_LINUX:
        return 0
    value = libc().syscall(_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION_FLAG))
    return int(value) if value > 0 else 0


def _fs_mask(abi: int) -> int:
    mask = _FS_ABI1
    if abi >= 2:
        mask |= REFER
    if abi >= 3:
        mask |= TRUNCATE
    if abi >= 5:
        mask |= IOCTL_DEV
    return mask


class Ruleset:
    """Prepared in the parent (paths opened there, because a forked child should do little); applied in
    the child by ``apply()``. Unusable paths are skipped, never fatal."""

    def __init__(self, *, read: Iterable[str], write: Iterable[str], deny_tcp: bool,
                 scope: bool = True, devices: Iterable[str] = ()) -> None:
        self.abi = abi_version()
        self.fds: list[tuple[int, int]] = []
        self.ruleset_fd = -1
        if not self.abi:
            return
        mask = _fs_mask(self.abi)
        attr = struct.pack("=Q", mask)
        if self.abi >= 4:
            attr += struct.pack("=Q", NET_BIND_TCP | NET_CONNECT_TCP if deny_tcp else 0)
        if self.abi >= 6:
            attr += struct.pack("=Q", (SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL) if scope else 0)
        buf = ctypes.create_string_buffer(attr, len(attr))
        fd = libc().syscall(_CREATE, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
        if fd < 0:
            self.abi = 0
            return
        self.ruleset_fd = int(fd)
        for path in dict.fromkeys(read):
            self._add(path, READ_ONLY & mask)
        for path in dict.fromkeys(write):
            self._add(path, mask)
        for path in dict.fromkeys(devices):
            self._add(path, DEVICE & mask)

    def _add(self, path: str, access: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(f"/proc/self/fd/{fd}"):
                access &= FILE_RIGHTS
            attr = struct.pack("=Qi", access, fd)
            buf = ctypes.create_string_buffer(attr, len(attr))
            libc().syscall(_ADD_RULE, ctypes.c_int(self.ruleset_fd), ctypes.c_int(_RULE_PATH_BENEATH), buf,
                           ctypes.c_uint32(0))
        finally:
            os.close(fd)

    def apply(self) -> None:
        """In the child: no_new_privs, then restrict self. Raises when Landlock refuses."""
        if self.ruleset_fd < 0:
            return
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        if libc().syscall(_RESTRICT, ctypes.c_int(self.ruleset_fd), ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")

    def close(self) -> None:
        if self.ruleset_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.ruleset_fd)
            self.ruleset_fd = -1
