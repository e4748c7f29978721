"""Helpers shared by the CLI commands: run a coroutine, print a PalaestraError as a one-line fix."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer

from palaestra.core.errors import PalaestraError

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine; a PalaestraError becomes a clear message and exit code 2, not a traceback."""
    try:
        return asyncio.run(coro)
    except PalaestraError as exc:
        typer.secho(f"error: {exc.message}", fg="red", err=True)
        if exc.hint:
            typer.echo(f"  fix: {exc.hint}", err=True)
        sys.exit(2)


def guarded(fn: Callable[..., T], *args: Any) -> T:
    """Call a function; a PalaestraError becomes a clear message and exit code 2."""
    try:
        return fn(*args)
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
        raise  # unreachable: fail() exits


def fail(message: str, hint: str | None = None, code: int = 2) -> None:
    typer.secho(f"error: {message}", fg="red", err=True)
    if hint:
        typer.echo(f"  fix: {hint}", err=True)
    raise typer.Exit(code)


# Exit codes of `eval run` and `eval reverify` (README "Everyday commands"): 0 complete, 1 an unexpected
# error, 2 refused or stopped (usage, config, invalid rows, an unwritable run directory), 3 incomplete
# (coverage below --min-coverage), 4 failed (no rollout scored).
EXIT_CODES_HELP = ("Exit codes: 0 complete; 2 refused or stopped (bad flags or config, invalid rows, "
                   "run directory not writable); 3 incomplete (coverage below --min-coverage); "
                   "4 failed (no rollout scored).")


def warn_journal(problems: list[str], limit: int = 20) -> None:
    """Say, on stderr, which journal lines could not be read: they are left out of every number."""
    if not problems:
        return
    typer.secho(f"warning: {len(problems)} journal line(s) could not be read and are left out of the metrics:",
                fg="yellow", err=True)
    for line in problems[:limit]:
        typer.echo(f"  {line}", err=True)
    if len(problems) > limit:
        typer.echo(f"  ... and {len(problems) - limit} more (all in metrics.json)", err=True)


def print_status(lines: list[str], ok: bool) -> None:
    """The verdict on a run and, when it fell short, each failure kind with an example and what to do."""
    if not lines:
        return
    typer.secho(lines[0], fg="green" if ok else "red", err=not ok)
    for line in lines[1:]:
        typer.echo(line, err=not ok)



def settings_of(ctx: typer.Context | None) -> Any:
    """The ``Settings`` the root callback read from the environment (the CLI's one read of it); a
    command invoked on its own (``config show`` re-enters ``eval run``) reads them here instead."""
    from palaestra.settings import Settings

    root = ctx.find_root() if ctx is not None else None
    if root is not None and isinstance(root.obj, Settings):
        return root.obj
    settings = Settings.from_env()
    if root is not None and root.obj is None:
        root.obj = settings
    return settings


@dataclass(frozen=True)
class ServeAuth:
    """The bearer token a ``serve`` command starts with and the guard that enforces it, chosen the same
    way for every server the CLI starts (model proxy, agent server, rollout service): the token named by
    ``--token-env``, else a generated one where one is needed, refused without one off loopback."""

    token: str | None
    from_env: bool  # the token is the value of ``token_env`` (never printed nor written to a file)
    token_env: str
    guard: Any  # palaestra.server.security.GuardPolicy (imported late: the CLI starts fast)

    @classmethod
    def choose(cls, host: str, *, token_env: str, no_token: bool, default_on: bool,
               allowed_hosts: list[str]) -> ServeAuth:
        """Decide the token for a server bound to ``host``; a refusal (``--no-token`` off loopback, ...)
        ends the command with its message and exit code 2."""
        from palaestra.server.auth import check_bind, token_from_env
        from palaestra.server.security import GuardPolicy, choose_token

        given = token_from_env(token_env)
        try:
            token = choose_token(host, given=given, no_token=no_token, default_on=default_on)
            check_bind(host, token, token_env=token_env)
            guard = GuardPolicy.for_bind(host, token=token, allowed_hosts=allowed_hosts)
        except PalaestraError as exc:
            fail(exc.message, exc.hint)
            raise  # unreachable: fail() exits
        return cls(token=token, from_env=given is not None, token_env=token_env, guard=guard)

    def save(self, kind: str, port: int, token_file: str | None) -> Path | None:
        """Write a generated token to ``token_file`` (default: the per-user file clients look for, named by
        ``kind`` and the bound ``port``); None when there is no token or it came from the environment."""
        if self.token is None or self.from_env:
            return None
        from palaestra.server.security import default_token_file, write_token_file

        return write_token_file(token_file or default_token_file(kind, port, settings_of(None).runtime_dir),
                                self.token)

    def announce(self, where: Path | None, use: str) -> None:
        """Tell the operator the token once, on stderr (never logged): the generated one and its file
        (``where``, from ``save``) with how clients ``use`` it, or which variable holds it."""
        if where is not None:
            typer.echo(f"  token: {self.token}\n  (saved in {where}, mode 0600; {use})", err=True)
        elif self.token is not None:
            typer.echo(f"  token: the value of ${self.token_env}", err=True)


def shown_host(host: str) -> str:
    """``host`` as it stands in a URL (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host



# The token options every ``serve`` command takes, declared once so their flags and help read the same.

def token_env_option(default: str = "a generated one") -> Any:
    """``--token-env``: ``default`` says what the token is when the variable is unset."""
    return typer.Option("PALAESTRA_TOKEN", help=f"Variable holding the bearer token to require (default: {default}).")


def no_token_option(exposure: str) -> Any:
    """``--no-token``: ``exposure`` says what anyone on this machine can then do (e.g. "run its tools")."""
    return typer.Option(False, "--no-token", help=f"Serve without a token (loopback only): anyone on this machine "
                                                  f"can then {exposure}.")


def token_file_option(kind: str) -> Any:
    """``--token-file``: its default is the file ``ServeAuth.save`` writes for ``kind``."""
    return typer.Option(None, help=f"Where to write a generated token (default: $XDG_RUNTIME_DIR/palaestra/"
                                   f"{kind}-PORT.token, else ~/.cache/palaestra/tokens/{kind}-PORT.token).")


def allowed_host_option() -> Any:
    """``--allowed-host`` (repeatable): Host names besides loopback's that the guard accepts."""
    return typer.Option([], "--allowed-host", help="Another Host name clients use (NAME or NAME:PORT; '*' for "
                                                   "any). Loopback names are always accepted.")
