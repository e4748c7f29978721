"""Where an environment runs, and the transports that reach it there (docs/architecture.md):

- ``inprocess``: its ASGI app in this process, called through ``client.HttpTransport`` with no socket;
- ``direct``: the ``EnvironmentHost`` object itself (``host.HostTransport``), the lowest overhead;
- ``local``: a server process on 127.0.0.1, restarted when it dies (``process.SupervisedTransport``);
- ``ray``: replicas as Ray actors (``ray.RayTransport``), started by the cluster fleet;
- a server elsewhere: ``client.EnvClient.http(URL)``.

Dependencies point one way: the collector uses placement, placement uses the transports and servers,
never back. Every placement hands out the same ``EnvClient``."""

from palaestra.placement.mount import PLACEMENTS, MountedEnv, Placement, mount_env

__all__ = ["PLACEMENTS", "MountedEnv", "Placement", "mount_env"]
