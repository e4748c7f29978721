"""A seccomp filter, assembled here as classic BPF so it needs no libseccomp and no compiler.

It is a deny list, not an allow list: a sandbox must still run arbitrary model-written programs, so it
refuses (with EPERM) only what a sandboxed program never needs and what kernel escapes are made of:
new namespaces and mounts, ptrace and cross-process memory access, kernel modules and kexec, BPF,
perf, userfaultfd, io_uring, keyrings, terminal injection (TIOCSTI) and the clock. ``clone3`` answers
ENOSYS so the C library falls back to ``clone``, whose flags a classic filter *can* inspect. With
``deny_inet`` (the ``process`` provider, which has no network namespace) IPv4/IPv6/packet sockets are
refused too. Used by bubblewrap through ``--seccomp FD`` and loaded directly by the process provider.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Iterable

from palaestra.sandbox.oslevel import PR_SET_NO_NEW_PRIVS, libc, prctl

# syscall name → (x86_64, aarch64 / asm-generic); None where the architecture has no such call.
_TABLE: dict[str, tuple[int | None, int | None]] = {
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "swapon": (167, 224),
    "swapoff": (168, 225), "reboot": (169, 142), "iopl": (172, None), "ioperm": (173, None),
    "init_module": (175, 105), "delete_module": (176, 106), "finit_module": (313, 273),
    "quotactl": (179, 60), "acct": (163, 89), "settimeofday": (164, 170), "adjtimex": (159, 171),
    "clock_settime": (227, 112), "clock_adjtime": (305, 266), "syslog": (103, 116), "ptrace": (101, 117),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "unshare": (272, 97), "setns": (308, 268),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282), "keyctl": (250, 219),
    "add_key": (248, 217), "request_key": (249, 218), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "lookup_dcookie": (212, 18), "vhangup": (153, 58), "uselib": (134, None),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442), "pidfd_getfd": (438, 438),
}
_CLONE = (56, 220)
_CLONE3 = (435, 435)
_SOCKET = (41, 198)
_IOCTL = (16, 29)
_ARCH = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1), "arm64": (0xC00000B7, 1)}

CLONE_NS_FLAGS = 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00020000 | 0x00000080
AF_INET, AF_INET6, AF_PACKET = 2, 10, 17
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000

_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_OFF_NR, _OFF_ARCH, _OFF_ARG0, _OFF_ARG1 = 0, 4, 16, 24


def supported() -> bool:
    return platform.machine() in _ARCH and os.uname().sysname == "Linux"


class _Asm:
    """Instructions with symbolic jump targets, resolved to relative offsets at the end."""

    def __init__(self) -> None:
        self.ops: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        self.ops.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ops)

    def assemble(self) -> bytes:
        out = bytearray()
        for i, (code, jt, jf, k) in enumerate(self.ops):
            rel = [self.labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf)]
            if any(not 0 <= r <= 255 for r in rel):
                raise ValueError("seccomp jump out of range")
            out += struct.pack("=HBBI", code, rel[0], rel[1], k & 0xFFFFFFFF)
        return bytes(out)


def build_filter(*, deny_inet: bool = False, extra_deny: Iterable[str] = ()) -> bytes:
    """The filter program as bytes of ``struct sock_filter`` (what ``bwrap --seccomp`` reads)."""
    arch, col = _ARCH[platform.machine()]
    names = sorted(set(_TABLE) | set(extra_deny))
    numbers = sorted({n for name in names if (n := _TABLE[name][col]) is not None})
    a = _Asm()
    a.op(_LD_ABS_W, _OFF_ARCH)
    a.op(_JEQ, arch, 0, "kill")
    a.op(_LD_ABS_W, _OFF_NR)
    if col == 0:
        a.op(_JGE, 0x40000000, "eperm", 0)  # x32 ABI numbers: never needed, and a classic bypass
    for nr in numbers:
        a.op(_JEQ, nr, "eperm", 0)
    a.op(_JEQ, _CLONE3[col], "enosys", 0)
    a.op(_JEQ, _CLONE[col], "clone", 0)
    a.op(_JEQ, _IOCTL[col], "ioctl", 0)
    if deny_inet:
        a.op(_JEQ, _SOCKET[col], "socket", 0)
    a.op(_RET, RET_ALLOW)
    a.label("clone")
    a.op(_LD_ABS_W, _OFF_ARG0)
    a.op(_JSET, CLONE_NS_FLAGS, "eperm", 0)
    a.op(_RET, RET_ALLOW)
    a.label("ioctl")
    a.op(_LD_ABS_W, _OFF_ARG1)
    a.op(_JEQ, TIOCSTI, "eperm", 0)
    a.op(_JEQ, TIOCLINUX, "eperm", 0)
    a.op(_RET, RET_ALLOW)
    if deny_inet:
        a.label("socket")
        a.op(_LD_ABS_W, _OFF_ARG0)
        for family in (AF_INET, AF_INET6, AF_PACKET):
            a.op(_JEQ, family, "eacces", 0)
        a.op(_RET, RET_ALLOW)
        a.label("eacces")
        a.op(_RET, RET_ERRNO | errno.EACCES)
    a.label("eperm")
    a.op(_RET, RET_ERRNO | errno.EPERM)
    a.label("enosys")
    a.op(_RET, RET_ERRNO | errno.ENOSYS)
    a.label("kill")
    a.op(_RET, RET_KILL_PROCESS)
    return a.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def loader(program: bytes) -> tuple[object, object]:
    """Prepare (in the parent) what ``install`` needs, so the forked child allocates nothing."""
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    return buf, prog


def install(prepared: tuple[object, object]) -> None:
    """Load the filter into the calling process (sets no_new_privs first, as the kernel requires)."""
    _, prog = prepared
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    seccomp_set_mode_filter = 1
    nr = 317 if platform.machine() == "x86_64" else 277
    if libc().syscall(nr, seccomp_set_mode_filter, 0, ctypes.byref(prog)) != 0:  # type: ignore[arg-type]
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")
