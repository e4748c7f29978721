"""Environment servers as Ray actors: N replicas of one ``EnvironmentHost`` each, and an ``EnvClient``
that spreads sessions over them and keeps every session on the replica that holds its state.

Stickiness costs no shared table: the replica's index is part of the session id the client hands out
(``"2:ab12…"``), so any rollout worker can route a call. A replica that dies takes its sessions with it;
the calls on them fail as ``EnvironmentFailure`` (the rollout is failed(environment) and retried), and
Ray restarts the replica for the sessions that follow."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from palaestra.core.errors import (
    EnvironmentFailure,
    InfraError,
    InvalidTask,
    PalaestraError,
    VerifierError,
)
from palaestra.core.records import Reference, Task, Trajectory, Verdict
from palaestra.wire.env import SessionHandle, ToolResult

DOWN_S = 2.0  # how long a replica that failed a call is skipped for new sessions (Ray restarts it meanwhile)
WAIT_UP_S = 60.0  # how long a call that needs no particular replica waits for one to be back
Envelope = dict[str, Any]  # {"ok": value} or {"error": {"kind", "message", "hint"?}}


class EnvReplica:
    """One replica, run as a Ray actor. Every answer is an envelope: a typed error must survive the trip
    (Ray would wrap it in a traceback-laden ``RayTaskError``)."""

    def __init__(self, spec: str, aliases: dict[str, str] | None = None) -> None:
        from palaestra.envs.registry import load_env, register_alias
        from palaestra.placement import DirectEnvClient
        from palaestra.server.sessions import EnvironmentHost

        for name, target in (aliases or {}).items():
            register_alias(name, target)
        self.client = DirectEnvClient(EnvironmentHost(load_env(spec)))

    async def _wrap(self, coro: Any) -> Envelope:
        try:
            return {"ok": await coro}
        except PalaestraError as exc:
            return {"error": exc.to_dict()}
        except Exception as exc:  # an environment bug: the rollout fails, the replica lives on
            return {"error": {"kind": "environment", "message": f"{type(exc).__name__}: {exc}"}}

    async def ping(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "sessions": len(self.client.host.sessions),
                "node_id": ray.get_runtime_context().get_node_id()}

    async def info(self) -> Envelope:
        return await self._wrap(self.client.info())

    async def open(self, task: dict[str, Any]) -> Envelope:
        async def run() -> dict[str, Any]:
            h = await self.client.open(Task.model_validate(task))
            return {"session_id": h.session_id, "tools": h.tools, "messages": h.messages,
                    "observation": h.observation}
        return await self._wrap(run())

    async def call_tool(self, session_id: str, name: str, arguments: Any) -> Envelope:
        async def run() -> dict[str, Any]:
            return (await self.client.call_tool(session_id, name, arguments)).to_dict()
        return await self._wrap(run())

    async def verify(self, session_id: str, trajectory: dict[str, Any]) -> Envelope:
        async def run() -> dict[str, Any]:
            v = await self.client.verify(session_id, Trajectory.model_validate(trajectory))
            return v.model_dump(mode="json")
        return await self._wrap(run())

    async def verify_stateless(self, task: dict[str, Any], trajectory: dict[str, Any]) -> Envelope:
        async def run() -> dict[str, Any]:
            v = await self.client.verify_stateless(Task.model_validate(task), Trajectory.model_validate(trajectory))
            return v.model_dump(mode="json")
        return await self._wrap(run())

    async def reference(self, task: dict[str, Any]) -> Envelope:
        async def run() -> dict[str, Any] | None:
            ref = await self.client.reference(Task.model_validate(task))
            return ref.model_dump(mode="json") if ref is not None else None
        return await self._wrap(run())

    async def close(self, session_id: str) -> Envelope:
        return await self._wrap(self.client.close(session_id))

    async def close_all(self) -> None:
        await self.client.aclose()


def _raise(err: dict[str, Any]) -> None:
    kind = str(err.get("kind") or "environment")
    message = str(err.get("message") or "")
    hint = err.get("hint")
    if kind == "environment":
        raise EnvironmentFailure(message, hint=hint)
    if kind == "verifier":
        raise VerifierError(message, hint=hint)
    if kind in ("judge", "sandbox", "model", "agent"):
        raise InfraError(kind, message, hint=hint)  # type: ignore[arg-type]
    if kind == "invalid_task":
        raise InvalidTask(message, hint=hint)
    raise PalaestraError(message, kind=kind, hint=hint)


class RayEnvClient:
    """``EnvClient`` over a set of ``EnvReplica`` actor handles (used inside rollout workers)."""

    def __init__(self, name: str, replicas: list[Any], *, offset: int = 0) -> None:
        if not replicas:
            raise EnvironmentFailure(f"environment '{name}' has no replicas")
        self.name = name
        self.replicas = replicas
        self.load = [0] * len(replicas)  # sessions this client holds open on each replica
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

    async def _call(self, index: int | None, method: str, *args: Any) -> Any:
        """Call one replica. ``index`` None: any replica will do (no session yet), so replicas that are
        down or restarting are skipped, and while all are, the call waits for one (up to ``WAIT_UP_S``).
        With an index the session lives on that replica, and losing it is final for the rollout."""
        from ray.exceptions import RayError

        give_up = time.monotonic() + (WAIT_UP_S if index is None else 0.0)
        pause = 0.1
        while True:
            i = self._pick() if index is None else index
            try:
                envelope: Envelope = await getattr(self.replicas[i], method).remote(*args)
                break
            except RayError as exc:
                self.down_until[i] = time.monotonic() + DOWN_S  # Ray is restarting it, or it is gone
                if index is None and time.monotonic() < give_up:
                    if all(d > time.monotonic() for d in self.down_until):
                        await asyncio.sleep(pause)
                        pause = min(pause * 2, 1.0)
                    continue
                text = str(exc).strip()
                raise EnvironmentFailure(
                    f"replica {i} of environment '{self.name}' failed during {method}: "
                    f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}",
                    hint="its sessions are lost and their rollouts are retried; if replicas keep dying, "
                         "check the environment for a crash bug",
                ) from None
        self.down_until[i] = 0.0
        if "error" in envelope:
            _raise(envelope["error"])
        if method == "open":
            envelope["ok"]["session_id"] = f"{i}:{envelope['ok']['session_id']}"
            self.load[i] += 1
        return envelope.get("ok")

    @staticmethod
    def _split(session_id: str) -> tuple[int, str]:
        index, sep, sid = session_id.partition(":")
        if not sep or not index.isdigit():
            raise EnvironmentFailure(f"session id '{session_id}' was not issued by a Ray replica set")
        return int(index), sid

    async def info(self) -> dict[str, Any]:
        return dict(await self._call(None, "info"))

    async def open(self, task: Task) -> SessionHandle:
        return SessionHandle.from_dict(await self._call(None, "open", task.model_dump(mode="json")))

    async def call_tool(self, session_id: str, name: str, arguments: Any) -> ToolResult:
        index, sid = self._split(session_id)
        data = await self._call(index, "call_tool", sid, name, arguments)
        return ToolResult(output=data.get("output"), error=data.get("error"))

    async def verify(self, session_id: str, trajectory: Trajectory) -> Verdict:
        index, sid = self._split(session_id)
        return Verdict.model_validate(await self._call(index, "verify", sid, trajectory.model_dump(mode="json")))

    async def verify_stateless(self, task: Task, trajectory: Trajectory) -> Verdict:
        data = await self._call(None, "verify_stateless", task.model_dump(mode="json"),
                                trajectory.model_dump(mode="json"))
        return Verdict.model_validate(data)

    async def reference(self, task: Task) -> Reference | None:
        data = await self._call(None, "reference", task.model_dump(mode="json"))
        return Reference.model_validate(data) if data else None

    async def close(self, session_id: str) -> None:
        index, sid = self._split(session_id)
        self.load[index] = max(0, self.load[index] - 1)
        await self._call(index, "close", sid)

    async def aclose(self) -> None:
        """The replicas belong to the driver, which stops them; nothing to release here."""
