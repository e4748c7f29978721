"""``palaestra sandbox ...``: what isolation this machine gives (``info``, and ``list``: every provider ours
and NeMo Gym's, or why it cannot run here), the local base image (``image build``), running one command
in a sandbox, and removing what crashed runs left behind."""

from __future__ import annotations

import json
import warnings

import typer

from palaestra.cli.common import guarded, run_async, settings_of

app = typer.Typer(no_args_is_help=True, help="Sandboxes: info, list, check, image build, run, cleanup.")


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


@app.command("list")
def list_providers(as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts.")) -> None:
    """Every sandbox provider, ours and those NeMo Gym lists: usable here, or why not."""
    from palaestra.sandbox.catalogue import catalogue

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = catalogue()
    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in rows], indent=2))
        return
    width = max(len(r.name) for r in rows)
    for r in rows:
        where = "palaestra" + (", nemo-gym" if r.nemo_gym else "") if r.palaestra else "nemo-gym" if r.nemo_gym else "-"
        mark = "ok         " if r.available else "unavailable"
        typer.echo(f"{r.name:<{width}}  {mark}  [{where}] {r.reason}")
        if r.enable and not r.available:
            typer.echo(f"{'':<{width}}  {'':<11}  to enable: {r.enable}")


image_app = typer.Typer(no_args_is_help=True, help="The local base image (no registry needed).")
app.add_typer(image_app, name="image")


@image_app.command("build")
def image_build(
    engine: list[str] = typer.Option([], "--engine", "-e",
                                     help="docker, podman or gvisor (default: every one usable here)."),
    tag: str = typer.Option("", help="Image tag (default: the base image's)."),
) -> None:
    """Build the local base image (busybox, bash, python3 from this machine's packages) into docker and
    podman, and unpack it for gvisor; a target that has it already is left as it is."""
    import time

    from palaestra.sandbox.baseimage import BASE_IMAGE, ensure_image, ensure_rootfs
    from palaestra.sandbox.providers import available_providers, get_provider

    usable = available_providers()
    targets = engine or [n for n in ("docker", "podman", "gvisor") if usable[n][0]]
    if not targets:
        typer.echo("no docker, podman or gvisor provider is usable here (see `palaestra sandbox list`)")
        raise typer.Exit(1)
    for name in targets:
        if name not in ("docker", "podman", "gvisor"):
            guarded(lambda n=name: _unknown_engine(n))
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            provider = guarded(lambda n=name: get_provider(n))
        if name == "gvisor":
            where, built = guarded(lambda p=provider: ensure_rootfs(p.base_rootfs))
            what = str(where)
        else:
            what, built = guarded(lambda p=provider: ensure_image(p.engine, tag or BASE_IMAGE))
        state = f"built in {time.perf_counter() - t:.1f} s" if built else "already there"
        typer.echo(f"{name}: {what} {state}")


def _unknown_engine(name: str) -> None:
    from palaestra.sandbox.types import SandboxError

    raise SandboxError(f"cannot build the base image for '{name}'", hint="use docker, podman or gvisor")


@app.command("run")
def run(
    ctx: typer.Context,
    command: list[str] = typer.Argument(..., help="The command and its arguments (no shell)."),
    provider: str = typer.Option("", "--sandbox", "-s", help="local, process, docker, podman, gvisor, apptainer, "
                                 "none; docker?runtime=runsc runs docker under gVisor."),
    image: str = typer.Option("", help="Container image (docker, podman, apptainer) or rootfs directory (gvisor)."),
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


@app.command("check")
def check(
    provider: str = typer.Argument(..., help="A provider spec: local, process, docker, podman, gvisor, "
                                   "'docker?runtime=runsc', ..."),
    image: str = typer.Option("", help="Image for docker/podman (default: the local base image, built when "
                              "missing) or rootfs directory for gvisor."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
) -> None:
    """Run a short conformance probe on one provider (create, exec, files, ordinary programs, timeout,
    process and memory limits, no network, host files hidden, close, cleanup): pass/fail per property.
    Exits 1 when any property fails."""
    from palaestra.sandbox.conformance import probe
    from palaestra.sandbox.providers import get_provider

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prov = guarded(lambda: get_provider(provider))
    engine = provider.split("?")[0]
    python, use = str(getattr(prov, "python", "python3")), image or None
    if engine in ("docker", "podman"):
        from palaestra.sandbox.baseimage import BASE_IMAGE, ensure_image

        use = use or guarded(lambda: ensure_image(prov.engine, BASE_IMAGE)[0])  # type: ignore[attr-defined]
        python = "python3"
    elif engine == "gvisor":
        python = "python3"
    results = run_async(probe(prov, image=use, python=python))
    failed = [c for c in results if not c.passed]
    if as_json:
        typer.echo(json.dumps({"provider": provider, "passed": not failed,
                               "checks": [c.as_dict() for c in results]}, indent=2))
    else:
        width = max(len(c.name) for c in results)
        for c in results:
            typer.echo(f"{c.name:<{width}}  {'pass' if c.passed else 'FAIL'}  {c.seconds:6.2f} s  {c.detail}")
        typer.echo(f"{provider}: {len(results) - len(failed)} of {len(results)} properties pass")
    if failed:
        raise typer.Exit(1)


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
