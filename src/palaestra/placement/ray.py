"""The ``ray`` placement: environment servers as Ray actors, N replicas of one ``EnvironmentHost`` each,
and a transport that spreads sessions over them and keeps every session on the replica that holds its
state.

Stickiness costs no shared table: the replica's index is part of the session id the transport hands out
(``"2:ab12…"``), so any rollout worker can route a call. A replica that dies takes its sessions with it;
the calls on them fail as ``EnvironmentFailure`` (the rollout is failed(environment) and retried), and
Ray restarts the replica for the sessions that follow. Replicas answer envelopes built by the wire codec
(``{"ok": value}`` or ``{"error": detail, "status": code}``): a typed error must survive the trip (Ray
would wrap an exception in a traceback-laden ``RayTaskError``), and the client maps it exactly as it maps
an HTTP answer."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from palaestra.client.transport import TransportFailure
from palaestra.wire.errors import WireError, error_detail

DOWN_S = 2.0  # how long a replica that failed a call is skipped for new sessions (Ray restarts it meanwhile)
WAIT_UP_S = 60.0  # how long a call that needs no particular replica waits for one to be back
Envelope = dict[str, Any]


class EnvReplica:
    """One replica, run as a Ray actor: a ``HostTransport`` whose answers are envelopes."""

    def __init__(self, spec: str, aliases: dict[str, str] | None = None,
                 options: dict[str, Any] | None = None) -> None:
        """``options``: the run's environment options (``rollout.config.env_options``)."""
        from palaestra.envs.registry import load_env, register_alias
        from palaestra.placement.host import HostTransport
        from palaestra.server.sessions import EnvironmentHost

        for name, target in (aliases or {}).items():
            register_alias(name, target)
        self.host = EnvironmentHost(load_env(spec, options))
        self.transport = HostTransport(self.host)

    async def ping(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "sessions": len(self.host.sessions),
                "node_id": ray.get_runtime_context().get_node_id()}

    async def request(self, op: str, args: dict[str, Any]) -> Envelope:
        try:
            return {"ok": await self.transport.request(op, **args)}
        except WireError as exc:
            return {"error": exc.detail, "status": exc.status}

    async def close_all(self) -> None:
        await self.host.close_all()


class RayTransport:
    """``EnvTransport`` over a set of ``EnvReplica`` actor handles (used inside rollout workers)."""

    def __init__(self, name: str, replicas: list[Any], *, offset: int = 0) -> None:
        if not replicas:
            raise ValueError(f"environment '{name}' has no replicas")
        self.name = name
        self.where = f"{len(replicas)} Ray replica(s)"
        self.replicas = replicas
        self.load = [0] * len(replicas)  # sessions this transport holds open on each replica
        self.down_until = [0.0] * len(replicas)  # monotonic time before which a replica is skipped
        self._next = offset % len(replicas)

    def _pick(self) -> int:
        """Fewest open sessions (from this worker's view) among replicas not marked down; ties go
        round-robin so workers spread out."""
        n = len(self.replicas)
        now = time.monotonic()
        order = [(self._next + i) % n for i in range(n)]
        up = [i for i in order if self.down_until[i] <= now] or sorted(order, key=lambda i: self.down_until[i])[:1]
        best = min(up, key=lambda i: self.load[i])
        self._next = (best + 1) % n
        return best

    async def _call(self, index: int | None, op: str, args: dict[str, Any]) -> Any:
        """Call one replica. ``index`` None: any replica will do (no session yet), so replicas that are
        down or restarting are skipped, and while all are, the call waits for one (up to ``WAIT_UP_S``).
        With an index the session lives on that replica, and losing it is final for the rollout."""
        from ray.exceptions import RayError

        give_up = time.monotonic() + (WAIT_UP_S if index is None else 0.0)
        pause = 0.1
        while True:
            i = self._pick() if index is None else index
            try:
                envelope: Envelope = await self.replicas[i].request.remote(op, args)
                break
            except RayError as exc:
                self.down_until[i] = time.monotonic() + DOWN_S  # Ray is restarting it, or it is gone
                if index is None and time.monotonic() < give_up:
                    if all(d > time.monotonic() for d in self.down_until):
                        await asyncio.sleep(pause)
                        pause = min(pause * 2, 1.0)
                    continue
                text = str(exc).strip()
                raise TransportFailure(
                    "unreachable",
                    f"replica {i} failed during {op}: {type(exc).__name__}: "
                    f"{text.splitlines()[0][:300] if text else ''}",
                    hint="its sessions are lost and their rollouts are retried; if replicas keep dying, "
                         "check the environment for a crash bug",
                ) from None
        self.down_until[i] = 0.0
        if "error" in envelope:
            raise WireError(envelope["error"], envelope.get("status"))
        result = envelope.get("ok")
        if op == "open":
            result = dict(result or {})
            result["session_id"] = f"{i}:{result['session_id']}"
            self.load[i] += 1
        return result

    async def request(self, op: str, **args: Any) -> Any:
        sid = args.get("session_id")
        if sid is None:
            return await self._call(None, op, args)
        index, sep, inner = sid.partition(":")
        if not sep or not index.isdigit() or int(index) >= len(self.replicas):
            # a session no replica issued: the same answer a replica gives for a session it does not hold
            raise WireError(error_detail("unknown_session", f"no session '{sid}' in environment '{self.name}' "
                                         "(not issued by its Ray replicas)"), 404)
        i = int(index)
        if op == "close":
            self.load[i] = max(0, self.load[i] - 1)
        return await self._call(i, op, {**args, "session_id": inner})

    async def aclose(self) -> None:
        """The replicas belong to the driver, which stops them; nothing to release here."""
