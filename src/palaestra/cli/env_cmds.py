"""``palaestra env ...``: list, inspect, serve and check environments."""

from __future__ import annotations

import json

import typer

from palaestra.cli.common import fail, run_async

app = typer.Typer(no_args_is_help=True, help="Environments: list, info, serve, check.")


@app.command("list")
def list_envs(as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts.")) -> None:
    """List the built-in environments with their domain, mechanism and bundled task count."""
    from palaestra.envs.registry import builtin_names, load_env

    rows = []
    for name in builtin_names():
        env = load_env(name)
        rows.append({"name": name, "domain": env.domain, "mechanism": env.mechanism,
                     "tasks": len(env.examples()), "tools": len(env.tool_specs()),
                     "description": env.info()["description"]})
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(expand=True)
    for col in ("name", "domain", "mechanism", "tasks", "tools"):
        table.add_column(col, no_wrap=True)
    table.add_column("description", overflow="ellipsis", no_wrap=True, ratio=1)
    for r in rows:
        table.add_row(r["name"], r["domain"], r["mechanism"], str(r["tasks"]), str(r["tools"]),
                      str(r["description"]))
    Console().print(table)


@app.command("info")
def info(spec: str = typer.Argument(..., help="Built-in name, module:Class or ./file.py:Class.")) -> None:
    """Show an environment's tools and their JSON schemas."""
    from palaestra.core.errors import PalaestraError
    from palaestra.envs.registry import load_env

    try:
        env = load_env(spec)
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
        return
    typer.echo(json.dumps(env.info(), indent=2))


@app.command("serve")
def serve(
    spec: str = typer.Argument(..., help="Built-in name, module:Class or ./file.py:Class."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default)."),
    port: int = typer.Option(8765, help="Port (0 picks a free one)."),
    token_env: str = typer.Option("PALAESTRA_TOKEN", help="Variable holding the bearer token (required off "
                                                          "loopback)."),
) -> None:
    """Serve an environment over HTTP (DESIGN §1)."""
    from palaestra.server import env_main

    env_main.main([spec, "--host", host, "--port", str(port), "--token-env", token_env])


@app.command("check")
def check(
    spec: str = typer.Argument(..., help="Built-in name, module:Class or ./file.py:Class."),
    placement: str = typer.Option("inprocess", help="inprocess | local | direct"),
    limit: int = typer.Option(0, help="Check only the first N bundled tasks (0 = all)."),
) -> None:
    """Run the conformance suite: oracle full reward, null zero, malformed calls, determinism, cleanup."""
    from rich.console import Console
    from rich.table import Table

    from palaestra.rollout.conformance import check_env

    report = run_async(check_env(spec, placement, limit or None))
    table = Table("check", "result", "detail", title=f"env check {report.env} ({report.placement}, "
                                                       f"{report.tasks} tasks)")
    for r in report.results:
        table.add_row(r.name, "[green]ok[/]" if r.ok else "[red]FAIL[/]", r.detail[:200])
    Console().print(table)
    if not report.ok:
        raise typer.Exit(1)
