"""The ``palaestra`` command: thin typer commands over the Python API (no logic lives here).
Heavy imports stay inside commands so ``palaestra --help`` and ``--version`` answer fast."""

from __future__ import annotations

import typer

from palaestra.cli import (
    adapt_cmds,
    agent_cmds,
    cluster_cmds,
    config_cmds,
    env_cmds,
    eval_cmds,
    model_cmds,
    plugins_cmds,
    report_cmds,
    sandbox_cmds,
    train_cmds,
)

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Palaestra: evaluate LLM agents in stateful environments and collect RL rollouts.")
app.add_typer(env_cmds.app, name="env")
app.add_typer(model_cmds.app, name="model")
app.add_typer(agent_cmds.app, name="agent")
app.add_typer(eval_cmds.app, name="eval")
app.add_typer(config_cmds.app, name="config")
app.add_typer(sandbox_cmds.app, name="sandbox")
app.command("report")(report_cmds.report)
app.command("view")(report_cmds.view)
eval_cmds.app.command("compare")(report_cmds.compare)
env_cmds.app.command("new")(adapt_cmds.env_new)
env_cmds.app.add_typer(adapt_cmds.import_app, name="import")
app.command("export")(train_cmds.export)
app.add_typer(train_cmds.serve_app, name="serve")
app.add_typer(cluster_cmds.app, name="cluster")
app.command("plugins")(plugins_cmds.plugins)


def _version(value: bool) -> None:
    if value:
        from palaestra import __version__

        typer.echo(f"palaestra {__version__}")
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Palaestra command line."""
    from palaestra.cli.common import settings_of

    settings_of(ctx)  # the PALAESTRA_* variables, read once here; commands take them from ctx.obj


def main() -> None:
    app()


if __name__ == "__main__":
    main()
