"""Helpers shared by the CLI commands: run a coroutine, print a PalaestraError as a one-line fix."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
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
