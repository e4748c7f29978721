"""The ``direct`` transport: calls go straight into an ``EnvironmentHost`` in this process, with no HTTP
and no serialization (the lowest overhead), yet through the same checks as the server (``wire.errors``
parses tool arguments; every exception becomes the error a server would have answered), so a fault is
the same failure kind here as over HTTP. The Ray replicas (``placement/ray.py``) serve through it too."""

from __future__ import annotations

from typing import Any

from palaestra.server.sessions import EnvironmentHost
from palaestra.wire.errors import tool_arguments, wire_error


class HostTransport:
    """``EnvTransport`` over an ``EnvironmentHost`` object."""

    def __init__(self, host: EnvironmentHost) -> None:
        self.host = host
        self.where = f"in-process host of '{host.env.name}'"

    async def request(self, op: str, **a: Any) -> Any:
        # one coroutine per operation, dispatched inline: every rollout makes three (open, verify, close)
        h = self.host
        try:
            if op == "open":
                return await h.open(a["task"])
            if op == "verify":
                return await h.verify(a["session_id"], a["trajectory"])
            if op == "close":
                return {"closed": await h.close(a["session_id"])}
            if op == "call_tool":
                h.get(a["session_id"])  # an unknown session before bad arguments, as the server checks them
                return await h.call_tool(a["session_id"], a["name"], tool_arguments(a["arguments"], a["name"]))
            if op == "verify_stateless":
                return await h.verify_stateless(a["task"], a["trajectory"])
            if op == "reference":
                return h.env.reference(a["task"])
            if op == "info":
                return h.env.info()
            if op == "health":
                return {"status": "ok", "env": h.env.name, "sessions": len(h.sessions), "closed": h.closed_total}
            raise ValueError(f"unknown environment operation {op!r}")
        except Exception as exc:
            raise wire_error(exc) from exc

    async def aclose(self) -> None:
        await self.host.close_all()
