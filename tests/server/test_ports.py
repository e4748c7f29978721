"""``free_port`` hands out ports another program binds by number. It picks below the kernel's ephemeral
range, where no ``bind(0)`` or outgoing connection of another process can take the port before that
program binds it (NeMo Gym's head server lost a port from ``bind(0)`` to Ray so, in CI)."""

from __future__ import annotations

import socket
from pathlib import Path

from palaestra.server.ports import free_port


def test_ports_are_free_below_the_ephemeral_range_and_bindable() -> None:
    start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(20000 <= p < start for p in ports), sorted(ports)  # outside Ray's worker ports and bind(0)'s
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # what the program it is handed to does


def test_a_taken_port_is_never_handed_out() -> None:
    held = []
    try:
        for _ in range(10):  # hold every port it gives: the next one must be another, free one
            port = free_port()
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen(1)
            held.append(s)
        assert len({s.getsockname()[1] for s in held}) == 10
    finally:
        for s in held:
            s.close()
