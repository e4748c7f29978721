"""``palaestra agent ...``: list the harnesses (what each needs, whether it is installed here), show one,
and serve one over the agent protocol for runs to route rows to (``--agent remote:URL``)."""

from __future__ import annotations

import json

import typer

from palaestra.cli.common import (
    ServeAuth,
    allowed_host_option,
    fail,
    no_token_option,
    shown_host,
    token_env_option,
    token_file_option,
)

app = typer.Typer(no_args_is_help=True, help="Agents (harnesses): list, info, serve.")


@app.command("list")
def list_agents(as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts.")) -> None:
    """List the harnesses with what each needs (binaries, Python extras, network), whether it is
    installed on this machine, and for external CLIs their model dialect and version (pinned, and the
    installed one where it differs)."""
    from palaestra.agents.catalog import describe_all

    rows = describe_all()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(expand=True)
    for col in ("name", "kind", "installed", "version", "dialect", "needs"):
        table.add_column(col, no_wrap=col != "needs", overflow="fold")
    table.add_column("summary", overflow="ellipsis", no_wrap=True, ratio=1)
    for r in rows:
        needs = r.get("needs") or {}
        parts = [*needs.get("binaries", []), *(f"py:{m}" for m in needs.get("python", []))]
        if needs.get("network") and r["kind"] in ("external CLI", "agent server"):
            parts.append("netns" if r["kind"] == "external CLI" else "http")
        mark = "[green]yes[/]" if r["installed"] else "[red]no[/]"
        version = r.get("installed_version") or r.get("version") or "-"
        if r.get("installed_version") and r.get("version") and r["installed_version"] != r["version"]:
            version = f"{r['installed_version']} (pinned {r['version']})"
        table.add_row(r["name"], r["kind"], mark, version, r.get("dialect") or "-", ", ".join(parts) or "-",
                      r.get("summary", ""))
    Console().print(table)


@app.command("info")
def info(name: str = typer.Argument(..., help="Harness name (see `palaestra agent list`).")) -> None:
    """Show one harness: what it is, what it needs, and what is missing here."""
    from palaestra.agents.catalog import describe
    from palaestra.agents.registry import agent_names

    kind = name.split(":", 1)[0].split("?", 1)[0]
    if kind not in agent_names():
        fail(f"unknown agent '{name}'", f"known agents: {', '.join(agent_names())}")
    typer.echo(json.dumps(describe(kind), indent=2))


@app.command("serve")
def serve(
    name: str = typer.Argument(..., help="Harness spec to serve: tool, bash, codex, langgraph?max_steps=8, ..."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback by default)."),
    port: int = typer.Option(8766, help="Port (0 picks a free one)."),
    max_steps: int = typer.Option(16, help="Step limit when a request names none (a run sends its own)."),
    call_host: list[str] = typer.Option([], "--call-host", help="Another host whose environment and model servers "
                                        "this server may call (NAME or NAME:PORT). Loopback is always allowed."),
    token_env: str = token_env_option(),
    no_token: bool = no_token_option("run the harness"),
    token_file: str | None = token_file_option("agent"),
    allowed_host: list[str] = allowed_host_option(),
) -> None:
    """Serve a harness over the agent protocol: POST /act (drive the harness on a session a run opened;
    what `--agent remote:URL` calls) and POST /run (a whole rollout). It asks for a bearer token, generated
    and printed at start (and saved in a 0600 token file) unless --no-token; runs give it as
    remote:URL?token_file=PATH."""
    from palaestra.agents.registry import make_agent
    from palaestra.agents.remote import is_remote
    from palaestra.core.errors import PalaestraError

    if is_remote(name):
        fail("an agent server serves a harness, not another agent server", "name a harness, e.g. tool")
    auth = ServeAuth.choose(host, token_env=token_env, no_token=no_token, default_on=True, allowed_hosts=allowed_host)
    try:
        harness = make_agent(name, max_steps=max_steps)
    except PalaestraError as exc:
        fail(exc.message, exc.hint)
        return
    from palaestra.rollout.agent_server import create_agent_app
    from palaestra.server.serving import run_guarded

    def ready(actual: int) -> None:
        shown = shown_host(host)
        where = auth.save("agent", actual, token_file)  # before the URL is printed: who reads one finds both
        typer.echo(f"palaestra agent '{harness.name}' on http://{shown}:{actual}", err=True)
        auth.announce(where, f"runs use --agent 'remote:http://{shown}:{actual}?token_file={where}'")

    run_guarded(create_agent_app(harness, allowed_hosts=tuple(call_host)), auth.guard, host=host, port=port,
                on_ready=ready, access_log=False)
