"""Runs inside a fresh network namespace, in front of an external CLI: brings the namespace's loopback
up, forwards its 127.0.0.1:PORT to the model proxy's unix socket, then runs the CLI and exits with
its status. The socket is the namespace's only way out, so the CLI can reach the proxy and nothing else.

Standard library only and run as a script (``python -I -S jail.py``): it starts in a few tens of ms
and never imports the project inside the namespace.

    python jail.py --uds /tmp/x/proxy.sock --port 8765 [--cwd DIR] -- cli args...
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import signal
import socket
import struct
import sys
from typing import NoReturn

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def loopback_up() -> None:
    """``ip link set lo up`` without needing iproute2 inside the namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        req = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", flags | _IFF_UP))


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):  # either side hung up: the other pump ends on its own
        pass


async def _forward(uds: str, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
    try:
        up_r, up_w = await asyncio.open_unix_connection(uds)
    except OSError as exc:
        print(f"palaestra jail: cannot reach the model proxy socket {uds}: {exc}", file=sys.stderr)
        client_w.close()
        return
    try:
        await asyncio.gather(_pump(client_r, up_w), _pump(up_r, client_w))
    finally:
        for w in (up_w, client_w):
            w.close()


async def _main(args: argparse.Namespace) -> NoReturn:
    loopback_up()
    listener = await asyncio.start_server(lambda r, w: _forward(args.uds, r, w), "127.0.0.1", args.port)
    proc = await asyncio.create_subprocess_exec(*args.command, cwd=args.cwd or None)
    loop = asyncio.get_running_loop()

    def relay(sig: int) -> None:
        if proc.returncode is None:
            proc.send_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # pid 1 ignores unhandled signals: pass them on
        loop.add_signal_handler(sig, relay, sig)
    code = await proc.wait()
    listener.close()
    sys.stdout.flush()
    sys.stderr.flush()
    # No orderly teardown of half-open forwarded connections: as the namespace's init, our exit ends
    # every process and socket in it anyway.
    os._exit(code if code >= 0 else 128 - code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jail.py")
    parser.add_argument("--uds", required=True, help="the model proxy's unix socket")
    parser.add_argument("--port", type=int, required=True, help="loopback port to forward from")
    parser.add_argument("--cwd", default="")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given after --")
    try:
        return asyncio.run(_main(args))
    except OSError as exc:  # not found, not executable, bad interpreter line ...
        print(f"palaestra jail: cannot start {args.command[0]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
