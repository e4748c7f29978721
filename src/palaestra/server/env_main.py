"""Entry point of an environment server process: ``python -m palaestra.server.env_main SPEC``.

The process binds 127.0.0.1 (port 0 by default), prints ``PALAESTRA_READY <port>`` once it accepts
connections, and exits with its parent's stdin (so a killed runtime never leaves it behind).

An environment server runs tools for whoever calls it, so it always asks for a bearer token unless told
``--no-token`` (loopback only). The runtime's own supervisor hands it the token on the first line of
stdin (``--token-stdin``: never in argv or the environment, where tool processes could read it); started
by hand, it generates one, prints it once on stderr and writes it to a 0600 token file."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from dataclasses import replace
from typing import Any

from palaestra.core.errors import PalaestraError
from palaestra.envs.registry import load_env
from palaestra.server.auth import TOKEN_ENV, check_bind, token_from_env
from palaestra.server.env_app import create_env_app
from palaestra.server.security import GuardPolicy, choose_token, default_token_file, write_token_file
from palaestra.server.serving import run_guarded
from palaestra.server.sessions import EnvironmentHost
from palaestra.settings import Settings


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
    p.add_argument("--max-sessions", type=int, default=None, help="session cap (default: the environment's own)")
    p.add_argument("--watch-stdin", action="store_true")
    p.add_argument("--token-env", default=TOKEN_ENV, help="variable holding the bearer token")
    p.add_argument("--token-stdin", action="store_true", help="read the bearer token from stdin's first line")
    p.add_argument("--options-stdin", action="store_true",
                   help="read the environment's constructor options (JSON) from the next stdin line")
    p.add_argument("--no-token", action="store_true", help="serve without a token (loopback only)")
    p.add_argument("--token-file", default=None, help="where to write a generated token")
    p.add_argument("--allowed-host", action="append", default=[], help="another Host name clients use")
    p.add_argument("--openenv", action="store_true", help="serve the OpenEnv protocol (server/openenv_face.py)")
    a = p.parse_args(argv)
    announce = not a.token_stdin
    settings = Settings.from_env()  # this process's edge: the one read of its environment
    try:
        if a.token_stdin:
            token: str | None = sys.stdin.buffer.readline().decode().strip() or None
            if token is None:
                raise PalaestraError("--token-stdin: no token on stdin", kind="config")
        else:
            given = token_from_env(a.token_env)
            token = choose_token(a.host, given=given, no_token=a.no_token, default_on=True)
            announce = given is None and token is not None
        check_bind(a.host, token, token_env=a.token_env)
        policy = GuardPolicy.for_bind(a.host, token=token, allowed_hosts=a.allowed_host)
        options: Any = None
        if a.options_stdin:
            try:
                options = json.loads(sys.stdin.buffer.readline() or b"{}")
            except json.JSONDecodeError as exc:
                raise PalaestraError(f"--options-stdin: not valid JSON ({exc})", kind="config") from None
            if not isinstance(options, dict):
                raise PalaestraError("--options-stdin: the options line is not a JSON object", kind="config")
        env = load_env(a.spec, options)
        tasks = env.examples() if a.openenv else []  # the tasks an OpenEnv reset() picks from
    except PalaestraError as exc:
        print(f"error: {exc.message}" + (f"\n  fix: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        sys.exit(2)
    host = EnvironmentHost(env, ttl_s=a.ttl, max_sessions=a.max_sessions)
    if a.openenv:  # OpenEnv's clients reach it on /ws; /health stays open like /healthz
        from palaestra.server.openenv_face import create_openenv_app

        app = create_openenv_app(host, tasks)
        policy = replace(policy, open_paths=(*policy.open_paths, "/health"))
    else:
        app = create_env_app(host)
    if a.watch_stdin:
        threading.Thread(target=_watch_parent, daemon=True).start()

    def ready(port: int) -> None:
        if announce and token is not None:
            where = write_token_file(a.token_file or default_token_file("env", port, settings.runtime_dir),
                                     token)
            shown = f"[{a.host}]" if ":" in a.host else a.host
            print(f"environment '{env.name}' on http://{shown}:{port}\n  token: {token}\n  (saved in {where}, "
                  "mode 0600; clients send Authorization: Bearer <token>)", file=sys.stderr, flush=True)
        print(f"PALAESTRA_READY {port}", flush=True)

    run_guarded(app, policy, host=a.host, port=a.port, on_ready=ready, lifespan="on", access_log=False,
                backlog=4096)


if __name__ == "__main__":
    main()
