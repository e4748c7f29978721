"""``palaestra env ...``: list, inspect, serve and check environments."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from palaestra.cli.common import (
    allowed_host_option,
    fail,
    guarded,
    no_token_option,
    run_async,
    settings_of,
    token_env_option,
    token_file_option,
)

if TYPE_CHECKING:
    from palaestra.core.records import Task

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
    token_env: str = token_env_option(),
    no_token: bool = no_token_option("run its tools"),
    token_file: str | None = token_file_option("env"),
    allowed_host: list[str] = allowed_host_option(),
    openenv: bool = typer.Option(False, "--openenv", help="Serve it as an OpenEnv environment server (its /ws "
                                 "protocol, for OpenEnv clients and TRL's OpenEnv integration; docs/openenv.md)."),
    nemo_gym: bool = typer.Option(False, "--nemo-gym", help="Serve it behind NeMo Gym's resources-server API, for "
                                  "NeMo Gym's own agents and `gym eval run` (loopback, no token; "
                                  "docs/nemo_gym_servers.md)."),
    nemo_gym_dir: str | None = typer.Option(None, "--nemo-gym-dir", help="With --nemo-gym: write the NeMo Gym "
                                            "config, the tasks as NeMo Gym rows and the placeholder server here."),
) -> None:
    """Serve an environment over HTTP (DESIGN §1). It asks for a bearer token, generated and printed at
    start (and saved in a 0600 token file) unless --no-token."""
    if openenv and nemo_gym:
        fail("--openenv and --nemo-gym serve two different protocols", "choose one (or run two servers)")
        return
    if nemo_gym:
        from palaestra.adapters.nemo_gym_face_config import serve as serve_nemo_face
        from palaestra.core.errors import PalaestraError

        try:
            serve_nemo_face(spec, host=host, port=port, nemo_gym_dir=nemo_gym_dir, allowed_hosts=tuple(allowed_host))
        except PalaestraError as exc:
            fail(exc.message, exc.hint)
        return
    from palaestra.server import env_main

    argv = [spec, "--host", host, "--port", str(port), "--token-env", token_env]
    argv += ["--no-token"] if no_token else []
    argv += ["--token-file", token_file] if token_file else []
    argv += ["--openenv"] if openenv else []
    for name in allowed_host:
        argv += ["--allowed-host", name]
    env_main.main(argv)


@app.command("check")
def check(
    ctx: typer.Context,
    spec: str = typer.Argument(..., help="Built-in name, module:Class or ./file.py:Class."),
    placement: str = typer.Option("inprocess", help="inprocess | local | direct"),
    limit: int = typer.Option(0, help="Check only the first N tasks (0 = all)."),
    input: str | None = typer.Option(None, "--input", "-i", help="Check on the tasks of this file (JSONL or "
                                     "Parquet) instead of the bundled data/*.jsonl; rows may omit `env`."),
    sandbox: str | None = typer.Option(None, "--sandbox", help="Sandbox provider for tasks that name none: local | "
                                       "process | docker | podman | apptainer | none (PALAESTRA_SANDBOX)."),
) -> None:
    """Run the conformance suite: oracle full reward, null zero, malformed calls, determinism, cleanup."""
    from rich.console import Console
    from rich.table import Table

    from palaestra.rollout.conformance import CheckReport, check_env

    async def checked() -> CheckReport:
        return await check_env(spec, placement, limit or None, _task_file(input, spec) if input else None,
                               options)

    from palaestra.rollout.config import env_options, resolve

    # the environment gets the run settings an `eval run` would give it: --sandbox over PALAESTRA_SANDBOX, ...
    options = env_options(guarded(resolve, {"sandbox": sandbox}, None, settings_of(ctx))[0])

    report = run_async(checked())
    table = Table("check", "result", "detail", title=f"env check {report.env} ({report.placement}, "
                                                       f"{report.tasks} tasks)")
    for r in report.results:
        table.add_row(r.name, "[green]ok[/]" if r.ok else "[red]FAIL[/]", r.detail[:200])
    Console().print(table)
    if not report.ok:
        raise typer.Exit(1)


def _task_file(path: str, spec: str) -> list[Task]:
    """The rows of ``env check --input``, read as ``eval run --input`` reads them (rows without ``env``
    belong to the checked environment); any bad row stops the check with its file, line and field."""
    from palaestra.core.errors import InvalidTask
    from palaestra.envs.registry import load_env_class
    from palaestra.rollout.tasks import load_task_file

    loaded = load_task_file(path, load_env_class(spec).name)
    if loaded.problems:
        listing = "\n  ".join(str(p) for p in loaded.problems[:20])
        raise InvalidTask(f"{len(loaded.problems)} invalid task row(s):\n  {listing}", hint="fix the rows")
    return list(loaded.tasks)
