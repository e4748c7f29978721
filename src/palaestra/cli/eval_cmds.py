"""``palaestra eval ...``: run, metrics, reverify."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from palaestra.cli.common import EXIT_CODES_HELP, fail, guarded, print_status, run_async, settings_of, warn_journal

app = typer.Typer(no_args_is_help=True, help="Evaluations: run, metrics, reverify.")


@app.command("run", epilog=EXIT_CODES_HELP)
def run(
    ctx: typer.Context,
    input: str | None = typer.Option(None, "--input", "-i", help="Task file (JSONL or Parquet)."),
    env: str | None = typer.Option(None, "--env", "-e", help="Environment (alone: its bundled tasks)."),
    limit: int | None = typer.Option(None, help="Use only the first N tasks."),
    repeats: int | None = typer.Option(None, "--repeats", "-k", help="Rollouts per task."),
    concurrency: int | None = typer.Option(None, "--concurrency", "-c", help="Rollouts in flight."),
    max_sessions: int | None = typer.Option(None, "--max-sessions", min=1,
                                            help="Sessions each environment holds at once (default: at least "
                                                 "--concurrency); a full store makes rollouts wait, not fail."),
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
    seed: int | None = typer.Option(None, help="Sampling seed (default: one chosen at random, recorded in run.json)."),
    tool_choice: str | None = typer.Option(None, "--tool-choice", help="auto | required | none: tool_choice of every "
                                           "model request that offers tools."),
    max_attempts: int | None = typer.Option(None, help="Attempts per rollout on infrastructure failure."),
    deadline_s: float | None = typer.Option(None, "--deadline", help="Seconds per rollout."),
    placement: str | None = typer.Option(None, help="inprocess | direct | local | ray (with --cluster)."),
    skip_invalid: bool | None = typer.Option(None, "--skip-invalid", help="Skip invalid rows (listed) instead of "
                                                                         "refusing to start."),
    min_coverage: float | None = typer.Option(None, "--min-coverage", min=0.0, max=1.0,
                                              help="Share of (task, repeat) slots that must be scored (default "
                                                   "1.0); below it the run exits 3, with none scored 4."),
    max_rollouts: int | None = typer.Option(None, "--max-rollouts", min=1,
                                            help="Refuse runs of more rollouts than this (default 10,000,000)."),
    max_steps: int | None = typer.Option(None, help="Agent step limit."),
    cluster: str | None = typer.Option(None, help="Worker processes on this machine: local[?workers=N] (one per "
                                                "CPU by default); or Ray: ray | ray:local | ray:HOST:PORT | "
                                                "ray://HOST:PORT [?workers=N&env_replicas=N]."),
    sandbox: str | None = typer.Option(None, "--sandbox", help="Sandbox provider for tasks that name none: local | "
                                       "process | docker | podman | apptainer | none (PALAESTRA_SANDBOX)."),
    code_scoring: str | None = typer.Option(None, "--code-scoring", help="`code` scoring for tasks that name none: "
                                            "fraction | all (PALAESTRA_CODE_SCORING)."),
    judge_model: str | None = typer.Option(None, "--judge-model", help="Judge of the `judge` environment: base URL, "
                                           "model spec or keyword (PALAESTRA_JUDGE_MODEL)."),
    judge_model_name: str | None = typer.Option(None, "--judge-model-name",
                                                help="Model name sent to the judge (PALAESTRA_JUDGE_MODEL_NAME)."),
    judge_api_key_env: str | None = typer.Option(None, "--judge-api-key-env", help="Variable holding the judge's "
                                                 "API key (PALAESTRA_JUDGE_API_KEY_ENV; OPENAI_API_KEY)."),
    nemo_compat: bool | None = typer.Option(None, "--nemo-compat/--no-nemo-compat",
                                            help="Grade rows exactly as NeMo Gym's verifiers do, in every "
                                                 "environment with that reading (docs/nemo_gym_parity.md)."),
    config: str | None = typer.Option(None, "--config", help="run.yaml with the same fields as the flags."),
    resume: str | None = typer.Option(None, "--resume", help="Finish the run in this directory."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    show_config: bool = typer.Option(False, "--show-config", help="Print the resolved config and exit."),
) -> None:
    """Collect rollouts, journal them, and print metrics. Re-running with the same --out resumes.

    Every row is checked against its environment first; any invalid row stops the run before it starts
    (or is skipped with --skip-invalid)."""
    from palaestra.api import resolve_run
    from palaestra.cli.progress import run_with_progress
    from palaestra.rollout.config import RunConfig

    given = locals()  # every RunConfig field is a parameter of this command, by the same name
    flags = {name: given[name] for name in RunConfig.model_fields if given.get(name) is not None}
    # The public API resolves (and runs) it: the command only adds the progress bar and the printing.
    settings = settings_of(ctx)  # read once by the root callback: PALAESTRA_* under the file and the flags
    cfg, sources = guarded(resolve_run, flags, config, resume or None, settings)
    if show_config:
        print_config(cfg.model_dump(mode="json"), sources, settings)
        return
    result = run_with_progress(cfg, quiet=quiet, settings=settings, sources=sources)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def print_config(values: dict[str, Any], sources: dict[str, str], settings: Any = None) -> None:
    """The resolved run config, then the machine settings, each with where it came from (default, env
    VAR, file PATH, flag); secrets redacted."""
    from rich.console import Console
    from rich.table import Table

    from palaestra.rollout.rundir import redact

    table = Table("option", "value", "from", title="resolved run config")
    for key, value in redact(values).items():
        if key != "run_id":  # the runtime sets it when the run starts
            table.add_row(key, json.dumps(value), sources.get(key, "default"))
    Console().print(table)
    if settings is not None:
        machine = Table("setting", "value", "from", "variable", title="machine settings")
        for key, entry in settings.effective().items():
            if key not in values:
                machine.add_row(key, json.dumps(entry["value"]), entry["source"], settings.variable_of(key) or
                                "PALAESTRA_<AGENT>_BIN")
        Console().print(machine)


@app.command("metrics")
def metrics(run_dir: str = typer.Argument(..., help="Run directory."),
            as_json: bool = typer.Option(False, "--json")) -> None:
    """Recompute metrics from the journal (also while the run is going)."""
    from rich.console import Console

    from palaestra.metrics.summary import format_table
    from palaestra.orchestrator import write_metrics
    from palaestra.rollout.rundir import TASKS, read_manifest
    from palaestra.rollout.tasks import read_tasks

    d = Path(run_dir)
    if not (d / TASKS).is_file():
        fail(f"{run_dir} is not a run directory (no {TASKS})", "give the --out directory of a run")
    m = guarded(lambda: write_metrics(d, read_tasks(d / TASKS), int(read_manifest(d).get("repeats", 1))))
    warn_journal(list(m.get("journal_problems") or []) + list(m.get("invalid_records") or []))
    if as_json:
        typer.echo(json.dumps(m, indent=2))
    else:
        Console().print(format_table(m))


@app.command("reverify", epilog=EXIT_CODES_HELP)
def reverify(run_dir: str = typer.Argument(..., help="Run directory."),
             placement: str = typer.Option("inprocess"),
             min_coverage: float = typer.Option(1.0, "--min-coverage", min=0.0, max=1.0,
                                                help="Share of slots that must be scored after re-scoring; "
                                                     "below it exits 3, with none scored 4.")) -> None:
    """Re-score stored rollouts with the current verifier (no model calls); write metrics and a diff."""
    from rich.console import Console

    from palaestra.metrics.summary import format_table
    from palaestra.rollout.reverify import reverify_run

    result = run_async(reverify_run(Path(run_dir), placement=placement, min_coverage=min_coverage))
    Console().print(format_table(result.metrics, title="metrics after reverify"))
    typer.echo(f"{result.checked} rollouts re-verified, {len(result.changed)} verdicts changed, "
               f"{result.failed} failed; diff in {result.diff_path}")
    warn_journal(result.journal_problems)
    if result.status is not None:
        print_status(result.status.lines(), result.status.status == "complete")
    if result.exit_code:
        raise typer.Exit(result.exit_code)
