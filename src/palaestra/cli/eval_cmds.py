"""``palaestra eval ...``: run, metrics, reverify."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from palaestra.cli.common import fail, guarded, run_async

app = typer.Typer(no_args_is_help=True, help="Evaluations: run, metrics, reverify.")


@app.command("run")
def run(
    input: str | None = typer.Option(None, "--input", "-i", help="Task file (JSONL or Parquet)."),
    env: str | None = typer.Option(None, "--env", "-e", help="Environment (alone: its bundled tasks)."),
    limit: int | None = typer.Option(None, help="Use only the first N tasks."),
    repeats: int | None = typer.Option(None, "--repeats", "-k", help="Rollouts per task."),
    concurrency: int | None = typer.Option(None, "--concurrency", "-c", help="Rollouts in flight."),
    model: str | None = typer.Option(None, "--model", "-m", help="scripted:POLICY | local[:PATH] | base URL."),
    model_name: str | None = typer.Option(None, help="Model name for an OpenAI-compatible endpoint."),
    api_key_env: str | None = typer.Option(None, help="Variable holding the API key (OPENAI_API_KEY)."),
    api_key_file: str | None = typer.Option(None, help="File holding the API key."),
    agent: str | None = typer.Option(None, help="Harness for rows that name none (tool)."),
    out: str | None = typer.Option(None, "--out", "-o", help="Run directory."),
    temperature: float | None = typer.Option(None),
    max_tokens: int | None = typer.Option(None),
    capture_tokens: bool | None = typer.Option(None, "--capture-tokens",
                                               help="Ask the server for token ids and logprobs (vLLM, SGLang)."),
    seed: int | None = typer.Option(None),
    max_attempts: int | None = typer.Option(None, help="Attempts per rollout on infrastructure failure."),
    deadline_s: float | None = typer.Option(None, "--deadline", help="Seconds per rollout."),
    placement: str | None = typer.Option(None, help="inprocess | direct | local | ray (with --cluster)."),
    skip_invalid: bool | None = typer.Option(None, "--skip-invalid", help="Skip malformed rows (listed)."),
    max_steps: int | None = typer.Option(None, help="Agent step limit."),
    cluster: str | None = typer.Option(None, help="Run on Ray: ray | ray:local | ray:HOST:PORT | ray://HOST:PORT "
                                                "[?workers=N&env_replicas=N]."),
    config: str | None = typer.Option(None, "--config", help="run.yaml with the same fields as the flags."),
    resume: str | None = typer.Option(None, "--resume", help="Finish the run in this directory."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    show_config: bool = typer.Option(False, "--show-config", help="Print the resolved config and exit."),
) -> None:
    """Collect rollouts, journal them, and print metrics. Re-running with the same --out resumes."""
    from palaestra.cli.progress import run_with_progress
    from palaestra.rollout.config import RunConfig, resolve

    given = locals()  # every RunConfig field is a parameter of this command, by the same name
    flags = {name: given[name] for name in RunConfig.model_fields if given.get(name) is not None}
    if resume:
        from palaestra.rollout.rundir import RUN_JSON, read_manifest

        if not (Path(resume) / RUN_JSON).is_file():
            fail(f"{resume} is not a run directory (no {RUN_JSON})", "give the --out directory of an earlier run")
        base = read_manifest(Path(resume))["config"]
        flags = {**{k: v for k, v in base.items() if v is not None}, **flags, "out": resume}
    cfg, sources = guarded(resolve, flags, config)
    if show_config:
        print_config(cfg.model_dump(mode="json"), sources)
        return
    run_with_progress(cfg, quiet=quiet)


def print_config(values: dict[str, Any], sources: dict[str, str]) -> None:
    from rich.console import Console
    from rich.table import Table

    from palaestra.rollout.rundir import redact

    table = Table("option", "value", "from", title="resolved run config")
    for key, value in redact(values).items():
        table.add_row(key, json.dumps(value), sources.get(key, "default"))
    Console().print(table)


@app.command("metrics")
def metrics(run_dir: str = typer.Argument(..., help="Run directory."),
            as_json: bool = typer.Option(False, "--json")) -> None:
    """Recompute metrics from the journal (also while the run is going)."""
    from rich.console import Console

    from palaestra.metrics.summary import format_table
    from palaestra.rollout.collector import write_metrics
    from palaestra.rollout.rundir import TASKS, read_manifest
    from palaestra.rollout.tasks import read_tasks

    d = Path(run_dir)
    if not (d / TASKS).is_file():
        fail(f"{run_dir} is not a run directory (no {TASKS})", "give the --out directory of a run")
    m = write_metrics(d, read_tasks(d / TASKS), int(read_manifest(d).get("repeats", 1)))
    if as_json:
        typer.echo(json.dumps(m, indent=2))
    else:
        Console().print(format_table(m))


@app.command("reverify")
def reverify(run_dir: str = typer.Argument(..., help="Run directory."),
             placement: str = typer.Option("inprocess")) -> None:
    """Re-score stored rollouts with the current verifier (no model calls); write metrics and a diff."""
    from rich.console import Console

    from palaestra.metrics.summary import format_table
    from palaestra.rollout.reverify import reverify_run

    result = run_async(reverify_run(Path(run_dir), placement=placement))
    Console().print(format_table(result.metrics, title="metrics after reverify"))
    typer.echo(f"{result.checked} rollouts re-verified, {len(result.changed)} verdicts changed, "
               f"{result.failed} failed; diff in {result.diff_path}")
