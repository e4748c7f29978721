"""The live view of a run: a rich progress bar (done, failed, rollouts/s, ETA) and the summary table."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from palaestra.api import EvalResult, evaluate_async
from palaestra.cli.common import print_status, run_async, warn_journal
from palaestra.core.records import Rollout
from palaestra.metrics.summary import format_table
from palaestra.rollout.config import RunConfig
from palaestra.rollout.gc_batch import tune_gc_for_batch
from palaestra.settings import Settings


def run_with_progress(cfg: RunConfig, quiet: bool = False, settings: Settings | None = None,
                      sources: dict[str, str] | None = None) -> EvalResult:
    """Run with a live bar, then print the skipped rows, the metrics, unreadable journal lines and the
    verdict; the caller exits with ``result.exit_code``."""
    console = Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]collect"), BarColumn(), MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}"), TextColumn("{task.fields[rate]:.1f} rollouts/s"),
        TimeRemainingColumn(), console=console, disable=quiet, transient=False,
    )
    state = {"bar": None, "t0": time.perf_counter(), "done": 0, "failed": 0}

    def on_start(total: int, already: int) -> None:
        if already:
            console.print(f"resuming: {already} of {total} rollouts already scored")
        state["bar"] = progress.add_task("collect", total=total, completed=already, failed=0, rate=0.0)

    def on_rollout(r: Rollout, final: bool) -> None:
        if r.outcome.status != "scored":
            state["failed"] += 1  # type: ignore[operator]
        if final:
            state["done"] += 1  # type: ignore[operator]
            rate = state["done"] / max(time.perf_counter() - state["t0"], 1e-9)  # type: ignore[operator]
            progress.update(state["bar"], advance=1, failed=state["failed"], rate=rate)  # type: ignore[arg-type]
        else:
            progress.update(state["bar"], failed=state["failed"])  # type: ignore[arg-type]

    tune_gc_for_batch()
    with progress:
        # quiet: no bar, so no per-rollout callback either (the multi-process driver would parse every
        # record's outcome for it, and its workers encode that for it: a cost for a bar nobody sees)
        result = run_async(evaluate_async(config=cfg, on_start=on_start, on_rollout=None if quiet else on_rollout,
                                          settings=settings, config_sources=sources))
    for line in result.skipped_rows:
        console.print(f"[yellow]skipped[/] {line}")
    out = Console()
    out.print(format_table(result.metrics, title=f"metrics — {result.run_dir}"))
    out.print(f"run directory: {result.run_dir} (rollouts.jsonl, metrics.json, run.json); "
              f"{result.collected} collected in {result.wall_s:.1f} s")
    warn_journal(result.journal_problems)
    lines = result.lines()
    if result.status != "complete":
        lines.append(f"  after fixing the cause: palaestra eval run --resume {result.run_dir} "
                     f"--max-attempts {2 * cfg.max_attempts} gives the failed slots more attempts")
    print_status(lines, result.status == "complete")
    return result
