"""A free port for a server that another program binds by number (a child process, NeMo Gym's head
server, a Ray node), on loopback.

The usual recipe, ``bind(("127.0.0.1", 0))`` then close and hand the number over, picks from the kernel's
ephemeral range: the very range every ``bind(0)`` and every outgoing connection of every process on the
machine draws from. Between the close and the other program's bind, any of them may take it, and that
program then dies with "address already in use" (CI saw NeMo Gym's head server lose its port while Ray,
started by the same command, bound its own). A port below the ephemeral range is only ever taken by a
program that names it, so one found free there stays free in practice. Ray's default worker ports
(10002-19999) are left alone too."""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]

_LOW = 20000  # above Ray's default worker ports (min_worker_port 10002, max_worker_port 19999)
_TRIES = 64


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range is 32768-60999


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing is bound to, chosen below the kernel's ephemeral range (see the
    module docstring); the OS's pick when that range leaves no room or nothing there is free."""
    top = _ephemeral_start()
    rng = random.SystemRandom()
    if top - _LOW > _TRIES:
        for _ in range(_TRIES):
            port = rng.randrange(_LOW, top)
            if _bindable(host, port):
                return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
