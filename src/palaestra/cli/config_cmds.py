"""``palaestra config show``: the resolved run config and where each value came from."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="Run configuration.")


@app.command("show", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def show(ctx: typer.Context) -> None:
    """Takes the same options as `eval run` (and --config run.yaml); runs nothing."""
    from typer.main import get_command

    from palaestra.cli import eval_cmds

    run_cmd = get_command(eval_cmds.app).get_command(ctx, "run")  # type: ignore[attr-defined]
    assert run_cmd is not None
    code = run_cmd.main([*ctx.args, "--show-config"], prog_name="palaestra config show",
                        standalone_mode=False)
    if code:
        raise typer.Exit(code)
