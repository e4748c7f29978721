"""``palaestra report``, ``palaestra view`` and ``palaestra eval compare``: thin commands over
``palaestra.report``. The functions are mounted one by one by ``cli/main.py`` (report and view at the top
level, compare under ``eval``); ``app`` groups the same three for tests and for stand-alone use."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from palaestra.cli.common import guarded

app = typer.Typer(no_args_is_help=True, help="Reports, the trajectory viewer and run comparison.")


@app.command("report")
def report(
    run_dir: str = typer.Argument(..., help="Run directory (the --out of `palaestra eval run`)."),
    out: str | None = typer.Option(None, "--out", "-o", help="Where to write (default RUN_DIR/report.html)."),
    max_detail_mb: float = typer.Option(12.0, help="Budget for embedded transcripts, in MB."),
    mlflow: str | None = typer.Option(None, "--mlflow", help="Also log to MLflow at this tracking URI or "
                                         "directory (a local file store works offline)."),
    wandb_project: str | None = typer.Option(None, "--wandb", help="Also log to this W&B project "
                                                "(offline mode; `wandb sync` uploads later)."),
) -> None:
    """Write a self-contained report.html (opens offline) for a run."""
    from palaestra.report.static import write_report

    path = guarded(lambda: write_report(Path(run_dir), out=Path(out) if out else None,
                                        max_detail_bytes=int(max_detail_mb * 1_000_000)))
    typer.echo(f"report: {path}")
    from palaestra.cli.common import warn_journal
    from palaestra.rollout.journal_read import read_journal

    warn_journal(guarded(lambda: read_journal(Path(run_dir) / "rollouts.jsonl", missing_ok=True))[1])
    if mlflow:
        from palaestra.report.exporters import export_mlflow

        run_id = guarded(lambda: export_mlflow(run_dir, tracking_uri=mlflow))
        typer.echo(f"mlflow: run {run_id} at {mlflow}")
    if wandb_project:
        from palaestra.report.exporters import export_wandb

        where = guarded(lambda: export_wandb(run_dir, project=wandb_project))
        typer.echo(f"wandb: offline run in {where} (upload with `wandb sync {where}`)")


@app.command("view")
def view(
    run_dir: str = typer.Argument(..., help="Run directory; may still be running."),
    host: str = typer.Option("127.0.0.1", help="Address to bind; anything but loopback needs --token."),
    port: int = typer.Option(8765, help="Port."),
    token: str | None = typer.Option(None, envvar="PALAESTRA_VIEW_TOKEN",
                                        help="Require this token (needed beyond 127.0.0.1; default on loopback: "
                                             "a fresh one, in the printed URL)."),
    no_token: bool = typer.Option(False, "--no-token", help="No token in the URL (loopback only): any program "
                                                            "on this machine can then read the run."),
    allowed_host: list[str] = typer.Option([], "--allowed-host", help="Another Host name the browser uses (NAME "
                                           "or NAME:PORT). Loopback names are always accepted."),
) -> None:
    """Serve the trajectory viewer for a run on 127.0.0.1; it refreshes while the run goes on. Open the
    printed URL: it carries the viewer's token (?token=...), like Jupyter's."""
    from palaestra.report.server import serve

    guarded(lambda: serve(run_dir, host=host, port=port, token=token, no_token=no_token,
                          allowed_hosts=tuple(allowed_host),
                          on_ready=lambda url: typer.echo(f"viewer: {url}  (Ctrl-C to stop)")))


@app.command("compare")
def compare(
    runs: list[str] = typer.Argument(..., help="BASELINE_RUN CANDIDATE_RUN [MORE ...]: each is compared "
                                     "with the first."),
    metric: str = typer.Option("reward", help="Per-task score: reward (mean reward) or pass (pass rate)."),
    html: str | None = typer.Option("compare.html", help="Write the HTML page here."),
    no_html: bool = typer.Option(False, "--no-html", help="Terminal only."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    n_boot: int = typer.Option(10_000, help="Bootstrap resamples for the interval."),
    seed: int = typer.Option(0, help="Seed of the bootstrap and permutation draws."),
) -> None:
    """Paired per-task differences between runs, with a 95% interval and a sign-flip permutation test,
    and each run's accuracy, model calls, tokens and cost (per answering model)."""
    from rich.console import Console

    from palaestra.report.compare import compare_runs, runs_spend
    from palaestra.report.compare_view import comparison_table, spend_table, write_comparison_html

    comparisons = guarded(lambda: compare_runs(runs, metric=metric, n_boot=n_boot, seed=seed))
    spend = guarded(lambda: runs_spend(runs))
    if as_json:
        typer.echo(json.dumps({"runs": [r.to_dict() for r in spend],
                               "comparisons": [c.to_dict() for c in comparisons]}, indent=2))
    else:
        console = Console()
        console.print(spend_table(spend))
        console.print(comparison_table(comparisons))
    if html and not no_html:
        path = write_comparison_html(comparisons, html, spend)
        typer.echo(f"comparison page: {os.fspath(path)}", err=as_json)
