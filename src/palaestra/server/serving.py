"""Run a guarded app with uvicorn until interrupted, and say where it listens once it does.

Shared by ``palaestra model serve``, ``env serve`` (``env_main``), ``serve rollouts`` and ``view``, so
each serves through :func:`palaestra.server.security.secure` and learns its real port (``--port 0``)
before it prints its URL or writes its token file."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

from starlette.types import ASGIApp

from palaestra.server.security import GuardPolicy, secure

__all__ = ["run_guarded"]


def run_guarded(app: ASGIApp, policy: GuardPolicy, *, host: str, port: int, on_ready: Callable[[int], None],
                log_level: str = "warning", lifespan: Literal["auto", "on", "off"] = "auto",
                **config: Any) -> None:
    """Serve ``secure(app, policy)`` on ``host:port``; call ``on_ready(actual_port)`` once it accepts
    connections. Exits 1 when the server cannot start (e.g. the port is taken)."""
    import uvicorn

    # uvicorn binds the port itself: handing it a pre-bound socket costs ~40 ms per request here.
    server = uvicorn.Server(uvicorn.Config(secure(app, policy), host=host, port=port, log_level=log_level,
                                           lifespan=lifespan, **config))

    async def run() -> None:
        serve = asyncio.create_task(server.serve())
        while not server.started and not serve.done():  # uvicorn offers no started event to wait on
            await asyncio.sleep(0.005)
        if serve.done():
            await serve
            raise SystemExit(1)
        on_ready(int(server.servers[0].sockets[0].getsockname()[1]))
        await serve

    asyncio.run(run())
