"""``palaestra sandbox ...``: what isolation this machine gives, running one command in a sandbox,
and removing what crashed runs left behind."""

from __future__ import annotations

import json
import warnings

import typer

from palaestra.cli.common import guarded, run_async, settings_of

app = typer.Typer(no_args_is_help=True, help="Sandboxes: info, run, cleanup.")


@app.command("info")
def info(as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts.")) -> None:
    """Show every provider, whether it works here, and what it isolates (and does not)."""
    from palaestra.sandbox.providers import default_provider_name, describe_all

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = describe_all()
    default = guarded(default_provider_name)
    if as_json:
        typer.echo(json.dumps({"default": default, "providers": rows}, indent=2))
        return
    typer.echo(f"default provider: {default}")
    for row in rows:
        mark = "ok  " if row.get("available") else "--  "
        typer.echo(f"{mark}{row['provider']}: {row.get('detail', '')}")
        for key, value in row.items():
            if key in ("provider", "available", "detail"):
                continue
            if isinstance(value, list):
                for item in value:
                    typer.echo(f"      {key}: {item}")
            else:
                typer.echo(f"      {key}: {value}")


@app.command("run")
def run(
    ctx: typer.Context,
    command: list[str] = typer.Argument(..., help="The command and its arguments (no shell)."),
    provider: str = typer.Option("", "--sandbox", "-s", help="local, process, docker, podman, apptainer or none."),
    image: str = typer.Option("", help="Container image (docker, podman, apptainer)."),
    timeout: float = typer.Option(30.0, help="Seconds before the command's whole process tree is killed."),
    network: str = typer.Option("none", help="none (default) or host."),
) -> None:
    """Run one command in a fresh sandbox and print its result (a quick way to try a provider)."""
    from palaestra.sandbox import SandboxSpec, get_provider

    async def go() -> int:
        prov = get_provider(provider or settings_of(ctx).sandbox)  # --sandbox, else $PALAESTRA_SANDBOX
        spec = SandboxSpec(image=image or None, network=network, labels={"run_id": "cli"})  # type: ignore[arg-type]
        async with await prov.create(spec) as box:
            result = await box.exec(command, timeout=timeout)
        typer.echo(result.stdout, nl=False)
        typer.echo(result.stderr, nl=False, err=True)
        if result.failure:
            typer.secho(f"[{result.failure}: {result.detail}]", fg="yellow", err=True)
        return result.exit_code

    raise typer.Exit(run_async(go()))


@app.command("cleanup")
def cleanup(
    provider: list[str] = typer.Option([], "--sandbox", "-s", help="Only these providers (default: all usable)."),
) -> None:
    """Remove sandboxes whose runtime is gone (processes, uids, cgroups, tmpfs, directories, containers)."""
    from palaestra.sandbox.providers import NAMES, available_providers, get_provider

    usable = available_providers()
    total = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in provider or [n for n in NAMES if usable[n][0]]:
            removed = guarded(lambda n=name: get_provider(n).cleanup())
            typer.echo(f"{name}: removed {removed}")
            total += removed
    typer.echo(f"removed {total} leftover sandbox(es)")
