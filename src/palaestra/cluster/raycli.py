"""``python -m palaestra.cluster.raycli ARGS``: Ray's own ``ray`` command, except that an explicit
``--node-ip-address=127.0.0.1`` stays 127.0.0.1 (plain ``ray start`` swaps in the machine's outward
address) and ``--node-ip-address=iface:NAME`` or ``=auto`` is resolved on the node itself; plus the
helpers a batch script needs, so it needs no ``ip``, ``curl`` or ``ray`` on PATH:

    raycli start --head --node-ip-address=iface:ib0 --port=6379 --block
    raycli node-ip iface:ib0                     # print this node's address on that interface
    raycli wait-nodes --address 10.0.0.1:6379 --nodes 2 --timeout 300
    raycli wait-http http://10.0.0.2:8000/v1/models --timeout 900
"""

from __future__ import annotations

import argparse
import fcntl
import socket
import struct
import sys
import time
import urllib.error
import urllib.request


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2.0):
            return True
    except OSError:
        return False


def wait_nodes(argv: list[str]) -> int:
    """Exit 0 once ``--nodes`` nodes are alive in the cluster at ``--address``; 1 with a reason otherwise.

    ``--watch-pid`` names the step that runs the head: if it dies, waiting longer is pointless."""
    p = argparse.ArgumentParser(prog="raycli wait-nodes")
    p.add_argument("--address", required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--watch-pid", type=int, default=None)
    args = p.parse_args(argv)
    from palaestra.cluster.runtime import LOOPBACK_IP, import_ray
    from palaestra.cluster.spec import LOOPBACK

    ray = import_ray()
    host = args.address.rsplit(":", 1)[0]
    end = time.monotonic() + args.timeout
    alive, last = 0, "the head's port is not open yet"
    while time.monotonic() < end:
        if args.watch_pid and not _alive(args.watch_pid):
            print(f"palaestra: the Ray head (process {args.watch_pid}) exited; see its error above",
                  file=sys.stderr)
            return 1
        if not ray.is_initialized() and _port_open(args.address):  # ray.init would block for long otherwise
            try:
                kw = {"_node_ip_address": LOOPBACK_IP} if host in LOOPBACK else {}
                ray.init(address=args.address, log_to_driver=False, configure_logging=False, **kw)
            except (ConnectionError, RuntimeError) as exc:
                last = f"{type(exc).__name__}: {exc}"
        if ray.is_initialized():
            alive = sum(1 for n in ray.nodes() if n.get("Alive"))
            if alive >= args.nodes:
                print(f"palaestra: {alive} Ray node(s) alive at {args.address}", flush=True)
                ray.shutdown()
                return 0
            last = f"{alive} of {args.nodes} nodes have joined"
        time.sleep(1.0)
    print(f"palaestra: the Ray cluster at {args.address} was not ready within {args.timeout:g} s ({last}); "
          "see the Ray logs of the missing nodes", file=sys.stderr)
    return 1


def node_ip(how: str) -> str:
    """``iface:NAME``: the IPv4 address of that interface; ``auto``: the address of the default route's
    interface (a UDP ``connect`` only picks the route, it sends nothing); anything else: itself."""
    if how.startswith("iface:"):
        name = how.removeprefix("iface:").encode()[:15]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name))  # SIOCGIFADDR
            except OSError as exc:
                raise SystemExit(f"palaestra: no IPv4 address on interface '{name.decode()}': {exc}") from None
        return socket.inet_ntoa(packed[20:24])
    if how == "auto":
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    return how


def wait_http(argv: list[str]) -> int:
    """Exit 0 once ``URL`` answers 200 (a model server that finished loading); 1 after ``--timeout``."""
    p = argparse.ArgumentParser(prog="raycli wait-http")
    p.add_argument("url")
    p.add_argument("--timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    end = time.monotonic() + args.timeout
    last = ""
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(args.url, timeout=10) as resp:
                if resp.status == 200:
                    print(f"palaestra: {args.url} is up", flush=True)
                    return 0
                last = f"HTTP {resp.status}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(2.0)
    print(f"palaestra: {args.url} not up after {args.timeout:g} s ({last}); see the model server's log",
          file=sys.stderr)
    return 1


def _resolve_ip_args(args: list[str]) -> list[str]:
    out = []
    for a in args:
        if a.startswith("--node-ip-address=") and (a.endswith("=auto") or "=iface:" in a):
            a = "--node-ip-address=" + node_ip(a.split("=", 1)[1])
        out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["wait-nodes"]:
        return wait_nodes(args[1:])
    if args[:1] == ["wait-http"]:
        return wait_http(args[1:])
    if args[:1] == ["node-ip"]:
        print(node_ip(args[1] if len(args) > 1 else "auto"))
        return 0
    args = _resolve_ip_args(args)
    from palaestra.cluster.runtime import import_ray

    import_ray()  # also keeps loopback addresses
    from ray.scripts.scripts import main as ray_main

    sys.argv = ["ray", *args]
    ray_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
