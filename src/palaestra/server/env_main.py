"""Entry point of an environment server process: ``python -m palaestra.server.env_main SPEC``.

The process binds 127.0.0.1 (port 0 by default), prints ``PALAESTRA_READY <port>`` once it accepts
connections, and exits with its parent's stdin (so a killed runtime never leaves it behind)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading

import uvicorn

from palaestra.core.errors import PalaestraError
from palaestra.envs.registry import load_env
from palaestra.server.auth import TOKEN_ENV, check_bind, protect, token_from_env
from palaestra.server.env_app import create_env_app
from palaestra.server.sessions import EnvironmentHost


def _watch_parent() -> None:
    """Exit when stdin closes: the parent died or closed the pipe on purpose."""
    try:
        while sys.stdin.buffer.read(1024):
            pass
    except Exception:
        pass
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="palaestra-env-server")
    p.add_argument("spec")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttl", type=float, default=3600.0)
    p.add_argument("--max-sessions", type=int, default=10_000)
    p.add_argument("--watch-stdin", action="store_true")
    p.add_argument("--token-env", default=TOKEN_ENV, help="variable holding the bearer token")
    a = p.parse_args(argv)
    token = token_from_env(a.token_env)
    try:
        check_bind(a.host, token, token_env=a.token_env)
        env = load_env(a.spec)
    except PalaestraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    app = protect(create_env_app(EnvironmentHost(env, ttl_s=a.ttl, max_sessions=a.max_sessions)), token)
    # uvicorn binds the port itself: handing it a pre-bound socket costs ~40 ms per request here.
    config = uvicorn.Config(app, host=a.host, port=a.port, log_level="warning", access_log=False, lifespan="on",
                            backlog=4096)
    server = uvicorn.Server(config)
    if a.watch_stdin:
        threading.Thread(target=_watch_parent, daemon=True).start()

    async def run() -> None:
        serve = asyncio.create_task(server.serve())
        while not server.started and not serve.done():  # uvicorn offers no started event to wait on
            await asyncio.sleep(0.005)
        if serve.done():
            await serve
            sys.exit(1)
        port = server.servers[0].sockets[0].getsockname()[1]
        print(f"PALAESTRA_READY {port}", flush=True)
        await serve

    asyncio.run(run())


if __name__ == "__main__":
    main()
