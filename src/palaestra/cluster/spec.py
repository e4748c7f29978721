"""The ``--cluster`` value: worker processes on this machine, or which Ray cluster to start or join, and
how many workers and replicas to run.

One string, like the scripted model's, so a run file and a flag say the same thing::

    local                    worker processes on this machine, one per CPU (cluster/procs.py)
    local?workers=2          ... exactly two
    ray                      join $RAY_ADDRESS, or start a private local cluster when it is unset
    ray:local                start a private local cluster (stopped at the end of the run)
    ray:auto                 join the cluster started with `ray start` on this machine
    ray:HOST:PORT            join the cluster whose head (GCS) listens there
    ray://HOST:PORT          join through Ray Client (needs the `ray[client]` extra)
    ...?workers=4&env_replicas=2&worker_cpus=1&cpus=4&object_store_mb=200
"""

from __future__ import annotations

from dataclasses import dataclass

from palaestra.core.errors import ConfigError
from palaestra.plugins.spec import parse_spec

LOOPBACK = ("127.0.0.1", "localhost", "::1")
_INT_OPTS = {"workers", "env_replicas", "cpus", "object_store_mb"}
_FLOAT_OPTS = {"worker_cpus", "env_cpus", "start_timeout_s"}
_LOCAL_OPTS = {"workers"}  # worker processes share this machine: nothing to place, reserve or join
_HINT = ("use local?workers=N for worker processes on this machine, or ray, ray:local, ray:auto, "
         "ray:HOST:PORT or ray://HOST:PORT, optionally followed by "
         "?workers=N&env_replicas=N&worker_cpus=F&env_cpus=F&cpus=N&object_store_mb=N&start_timeout_s=S")


@dataclass(frozen=True)
class ClusterSpec:
    """A parsed ``--cluster`` value. ``address`` None means: start a private local cluster."""

    address: str | None = None
    workers: int | None = None  # rollout workers; None: one per CPU the cluster (or this machine) offers
    backend: str = "ray"  # "local": worker processes on this machine, no Ray (cluster/procs.py)
    env_replicas: int = 2  # replicas of each environment server (with --placement ray)
    worker_cpus: float = 1.0  # CPUs each rollout worker reserves (a scheduling unit, not a limit)
    env_cpus: float = 0.01  # CPUs each environment replica reserves (Ray's SPREAD ignores actors with none)
    cpus: int | None = None  # CPUs of a private local cluster (default: this machine's)
    object_store_mb: int = 200  # object store of a private local cluster: rollouts are small
    start_timeout_s: float = 180.0  # how long workers and replicas may take to be placed and start

    @property
    def local(self) -> bool:
        return self.address is None

    @property
    def loopback(self) -> bool:
        """Whether the driver reaches the cluster on this machine's loopback (and must stay there)."""
        if self.address is None:
            return True
        host = self.address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
        return host in LOOPBACK


def parse_cluster(value: str) -> ClusterSpec:
    """Parse ``--cluster``; errors name the bad part and show the accepted forms."""
    text = value.strip()
    body = text.partition("?")[0]
    if body == "local":
        return _parse_local(value, text)
    if body == "ray":
        from palaestra.settings import machine

        address: str | None = machine().ray_address  # $RAY_ADDRESS
    elif body.startswith("ray://"):
        address = body
        if not body.removeprefix("ray://"):
            raise ConfigError(f"--cluster '{value}': ray:// needs HOST:PORT", hint=_HINT)
    elif body.startswith("ray:"):
        rest = body.removeprefix("ray:")
        if rest == "local":
            address = None
        elif rest == "auto":
            address = "auto"
        else:
            host, sep, port = rest.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ConfigError(f"--cluster '{value}': '{rest}' is not HOST:PORT", hint=_HINT)
            address = rest
    else:
        raise ConfigError(f"unknown cluster '{value}'", hint=_HINT)
    opts: dict[str, int | float] = {}
    for key, raw in parse_spec(text, what="--cluster").options.items():  # the one plugin-spec grammar
        try:
            if key in _INT_OPTS:
                opts[key] = int(raw)
            elif key in _FLOAT_OPTS:
                opts[key] = float(raw)
            else:
                raise ConfigError(f"--cluster '{value}': unknown option '{key}'", hint=_HINT)
        except ValueError:
            raise ConfigError(f"--cluster '{value}': {key}={raw!r} is not a number", hint=_HINT) from None
        if opts[key] < 0 or (key in ("workers", "env_replicas", "cpus") and opts[key] < 1):
            raise ConfigError(f"--cluster '{value}': {key} must be positive", hint=_HINT)
    return ClusterSpec(address=address, **opts)  # type: ignore[arg-type]


def _parse_local(value: str, text: str) -> ClusterSpec:
    opts = parse_spec(text, what="--cluster").options
    for key in opts:
        if key not in _LOCAL_OPTS:
            raise ConfigError(f"--cluster '{value}': option '{key}' is not one of local's (workers)", hint=_HINT)
    workers: int | None = None
    if "workers" in opts:
        try:
            workers = int(opts["workers"])
        except ValueError:
            raise ConfigError(f"--cluster '{value}': workers={opts['workers']!r} is not a number", hint=_HINT) from None
        if workers < 1:
            raise ConfigError(f"--cluster '{value}': workers must be positive", hint=_HINT)
    return ClusterSpec(backend="local", workers=workers)
