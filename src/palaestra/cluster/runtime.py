"""Connecting to Ray: import it with a clear error when the extra is missing, keep loopback addresses
on loopback, and start or join the cluster a ``ClusterSpec`` names."""

from __future__ import annotations

import math
import os
import secrets
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from palaestra.cluster.spec import LOOPBACK, ClusterSpec
from palaestra.core.errors import ConfigError
from palaestra.settings import export_to_children, has_variable

LOOPBACK_IP = "127.0.0.1"


class ClusterError(ConfigError):
    """The cluster could not be reached, or could not place what the run needs."""

    kind = "cluster"


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise ConfigError("--cluster ray needs Ray, which is not installed",
                          hint="pip install 'palaestra[ray]' (and 'ray[client]' for ray:// addresses)") from None
    keep_loopback()
    return ray


def keep_loopback() -> None:
    """Make Ray keep an explicit 127.0.0.1 instead of swapping in the machine's outward address.

    Ray "helpfully" resolves a loopback node address to the address other machines would use. On a
    machine that must keep all traffic on loopback (CI, a laptop on an untrusted network, a test), that
    sends every connection to an address that may be firewalled. An address given explicitly is meant."""
    import ray._private.services as services

    current = services.resolve_ip_for_localhost
    if getattr(current, "_palaestra_loopback", False):
        return

    def resolve(host: str) -> str:
        return host if host in ("127.0.0.1", "::1") else str(current(host))

    resolve._palaestra_loopback = True  # type: ignore[attr-defined]
    services.resolve_ip_for_localhost = resolve


@dataclass
class Connection:
    """This process's link to the cluster; ``owned`` when this call initialised Ray in this process (so it
    disconnects at the end, which also stops a private local cluster)."""

    ray: ModuleType
    address: str
    owned: bool

    def resources(self) -> dict[str, float]:
        return dict(self.ray.cluster_resources())

    def alive_nodes(self) -> int:
        return sum(1 for n in self.ray.nodes() if n.get("Alive"))

    def close(self) -> None:
        if self.owned and self.ray.is_initialized():
            self.ray.shutdown()


def connect(spec: ClusterSpec) -> Connection:
    """Start a private local cluster or join the one ``spec`` names (reusing an existing connection)."""
    ray = import_ray()
    if ray.is_initialized():
        return Connection(ray, "(already connected)", owned=False)
    if spec.local and not has_variable("RAY_AUTH_MODE") and not has_variable("RAY_AUTH_TOKEN"):
        # a private cluster gets a private token (inherited by its processes), rather than Ray
        # writing one into ~/.ray or reusing another cluster's
        export_to_children({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)})
    _auth_from_env()
    kw: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if spec.local:
        # logical CPUs are scheduling tokens: by default, enough for the workers asked for plus the replicas
        wanted = math.ceil((spec.workers or 0) * spec.worker_cpus) + 1
        kw.update(num_cpus=spec.cpus or max(os.cpu_count() or 1, wanted), include_dashboard=False,
                  object_store_memory=spec.object_store_mb * 1024 * 1024, _node_ip_address=LOOPBACK_IP)
        where = "a private local cluster"
    else:
        kw["address"] = spec.address
        if spec.loopback and not str(spec.address).startswith("ray://"):
            kw["_node_ip_address"] = LOOPBACK_IP
        where = f"the Ray cluster at {spec.address}"
    try:
        ray.init(**kw)
    except ConnectionError as exc:
        raise ClusterError(f"could not join {where}: {exc}",
                           hint="is the head running (`ray status`)? check the address and RAY_AUTH_TOKEN") from None
    except Exception as exc:
        raise ClusterError(f"could not start or join {where}: {type(exc).__name__}: {exc}",
                           hint="check the --cluster value; see the Ray logs under /tmp/ray") from None
    return Connection(ray, spec.address or "local", owned=True)


def _auth_from_env() -> None:
    """Ray reads RAY_AUTH_MODE once, when it is imported; a token set later (a test fixture, a launcher)
    would be ignored and the cluster would refuse us. Re-read it, as Ray itself does when it turns auth on.
    The token loader caches the first token it read, so a process that joins a second cluster (another
    token) would be refused by it: its cache is reset too."""
    if not has_variable("RAY_AUTH_MODE"):
        return
    try:
        import importlib

        raylet = importlib.import_module("ray._raylet")
        raylet.Config.initialize("")
        raylet.AuthenticationTokenLoader.instance().reset_cache()
    except Exception:  # an older or newer Ray without these hooks reads the variable at ray.init anyway
        pass


def is_loopback(host: str) -> bool:
    return host in LOOPBACK
