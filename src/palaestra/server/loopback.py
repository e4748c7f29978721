"""Run an ASGI app on 127.0.0.1 in a background thread for as long as a ``with`` block lasts.

For tests and notebooks that need a real HTTP server (an OpenAI SDK, a CLI harness, a judge) next to code
that runs in the caller's event loop: the server gets its own loop in a daemon thread, an OS-chosen port,
and is always stopped on exit, so nothing outlives the block and nothing binds beyond loopback. The app is
served behind the same Host and Origin checks as every Palaestra server (and ``token``, when given).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

__all__ = ["serve_app"]


@contextmanager
def serve_app(app: Any, *, path: str = "", start_timeout_s: float = 10.0,
              lifespan: Literal["auto", "on", "off"] = "off", token: str | None = None) -> Iterator[str]:
    """Yield ``http://127.0.0.1:PORT`` + ``path`` while ``app`` is served; stop the server afterwards.

    ``lifespan="auto"`` runs the app's start-up and shut-down hooks (an app that needs them, like the
    trajectory viewer's journal follower); plain API apps skip them. With ``token``, requests must carry
    it (``Authorization: Bearer``)."""
    import uvicorn

    from palaestra.server.security import GuardPolicy, secure

    server = uvicorn.Server(uvicorn.Config(secure(app, GuardPolicy(token=token)), host="127.0.0.1", port=0,
                                           log_level="warning", lifespan=lifespan,
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, name="palaestra-loopback-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the loopback server for {type(app).__name__} did not start within "
                               f"{start_timeout_s:g} s (see the uvicorn log above)")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
