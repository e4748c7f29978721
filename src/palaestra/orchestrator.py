"""The orchestrator (DESIGN §1): one evaluation run from its config to its metrics and report.

It sits above everything a run uses: the collector (local, or the Ray collector of ``cluster/`` when the
run names a cluster), the metrics, the report and the token-fidelity summary of ``train/``. Nothing
below imports it, which is what keeps ``rollout`` free of upward imports (docs/architecture.md)."""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaestra.core.errors import InvalidTask
from palaestra.core.records import Task
from palaestra.envs.registry import accepted_options, load_env_class, register_alias, spec_for
from palaestra.metrics.status import RunStatus, run_status
from palaestra.metrics.summary import compute_metrics
from palaestra.metrics.usage import model_usage
from palaestra.rollout import rundir
from palaestra.rollout.collector import Collector, ProgressFn, check_size, plan
from palaestra.rollout.config import RunConfig, effective_settings, env_options
from palaestra.rollout.journal import Written
from palaestra.rollout.journal_read import read_journal
from palaestra.rollout.models import refuse_unreachable
from palaestra.rollout.results import JournalRead, env_metrics, expected_counts, gc_paused, read_run_journal
from palaestra.rollout.selection import select_tasks
from palaestra.rollout.tasks import read_tasks, write_tasks
from palaestra.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What ``run_eval`` did, with everything the CLI prints: metrics, the verdict on the run (``status``,
    whose ``exit_code`` the CLI exits with), the skipped rows and the journal lines that could not be
    read."""

    run_dir: Path
    metrics: dict[str, Any]
    collected: int = 0
    skipped_rows: list[str] = field(default_factory=list)
    resumed: int = 0
    wall_s: float = 0.0
    status: RunStatus | None = None
    journal_problems: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return self.status.exit_code if self.status is not None else 0


def write_metrics(run_dir: Path, tasks: list[Task], repeats: int,
                  prices: dict[str, float] | None = None, *, journal: JournalRead | None = None) -> dict[str, Any]:
    """Metrics from the journal, written to metrics.json. Every journal line that could not be read is
    counted in ``journal_unreadable`` and described (with its line) in ``journal_problems`` (not JSON)
    or ``invalid_records`` (JSON, not a Rollout). ``journal``: the journal as already read (the end of a
    run reads it once for the metrics and the report); read here when not given."""
    read = journal if journal is not None else read_run_journal(run_dir / rundir.JOURNAL)
    records, problems, invalid = read.records, read.problems, read.invalid
    metrics = compute_metrics(read.counted, expected_counts(tasks, repeats))
    metrics["invalid_records"] = invalid
    metrics["journal_unreadable"] = len(problems) + len(invalid)
    metrics["model_usage"] = model_usage(records, prices)
    with_tokens = [r for r in read.rollouts if any(c.generation_token_ids for c in r.trajectory.model_calls)]
    if with_tokens:  # token fidelity for RL: how many turns extend the previous turn's exact tokens
        from palaestra.train.sequence import drift_summary

        metrics["token_fidelity"] = drift_summary(with_tokens)
    hooks = env_metrics({r.env for r in read.counted}, read.rollouts)
    if hooks:
        metrics["env_metrics"] = hooks
    if problems:
        metrics["journal_problems"] = problems
    with rundir.guard_fs("write metrics to", run_dir / rundir.METRICS):
        rundir.write_json_atomic(run_dir / rundir.METRICS, metrics)
    return metrics


async def _models_reachable(cfg: RunConfig, tasks: list[Task]) -> None:
    """Refuse the run before its first rollout when a model server it calls is down. Not on Ray: a worker
    on another machine may reach a server this one does not (each node's own ``localhost``, say)."""
    if not (cfg.cluster or "").startswith("ray"):
        await refuse_unreachable(cfg, {task.model or cfg.model for task in tasks})


async def run_eval(cfg: RunConfig, *, on_start: Callable[[int, int], None] | None = None,
                   on_rollout: ProgressFn | None = None, settings: Settings | None = None,
                   sources: dict[str, str] | None = None) -> RunResult:
    """Start or resume the run in ``cfg.out``; return its metrics and the verdict on it.

    Everything that can be known before the first rollout is checked first, so a run that cannot
    succeed costs nothing: every row against its environment (all bad rows in one error), the run's size
    against ``max_rollouts``, and that the run directory can be written. A run that went ahead but did
    not reach ``min_coverage`` is not an exception: ``RunResult.status`` says so, and why.

    ``settings`` (what the edge read from the environment) and ``sources`` (where each of ``cfg``'s values
    came from, as ``rollout.config.resolve`` says) are recorded in run.json as the effective settings;
    nothing here reads the environment. The run's id reaches what labels sandboxes as ``cfg.run_id``."""
    t0 = time.perf_counter()
    if cfg.repeats > cfg.max_rollouts:  # before reading a single row: the answer cannot change
        check_size(None, cfg.repeats, cfg.max_rollouts)
    run_dir = Path(cfg.out) if cfg.out else rundir.default_out(cfg.env)
    skipped: list[str] = []
    if (run_dir / rundir.TASKS).is_file() and (run_dir / rundir.RUN_JSON).is_file():
        with rundir.guard_fs("read the run in", run_dir):
            tasks = read_tasks(run_dir / rundir.TASKS)  # resume: the snapshot is the truth
            manifest = rundir.read_manifest(run_dir)
            manifest_envs = manifest.get("envs", {})
        cfg = cfg.model_copy(update={"run_id": str(manifest.get("run_id") or "") or None})
        if cfg.seed is None and isinstance(manifest.get("seed"), int):  # the seed the run started with
            cfg = cfg.model_copy(update={"seed": manifest["seed"]})
        for name, meta in manifest_envs.items():
            register_alias(name, meta.get("spec", name))
        check_size(len(tasks), cfg.repeats, cfg.max_rollouts)
        resumed = True
    else:
        resumed = False
        tasks, skipped = select_tasks(cfg)
        if not tasks:
            raise InvalidTask("no tasks to run" + (f" ({len(skipped)} invalid row(s) skipped)" if skipped else ""),
                              hint="check --input/--env and --limit")
        check_size(len(tasks), cfg.repeats, cfg.max_rollouts)
        # no --seed: pick one and record it (run.json "seed"), so `--seed N` repeats this run's sampling
        cfg = cfg.model_copy(update={"run_id": cfg.run_id or uuid.uuid4().hex,
                                     "seed": cfg.seed if cfg.seed is not None else secrets.randbelow(2**31)})
        options = env_options(cfg)
        envs = {}
        for name in sorted({t.env for t in tasks}):
            cls = load_env_class(name)
            envs[name] = {"spec": spec_for(name), "version": cls.version, "verifier_hash": cls.verifier_hash()}
            # Grading that cannot work (no judge configured) refuses the run here, before anything is written;
            # what the environment reports (which judge grades) is recorded in run.json.
            envs[name].update(cls(**accepted_options(cls, options)).preflight([t for t in tasks if t.env == name]))
        await _models_reachable(cfg, tasks)  # a model server that is down refuses the run here too
        with rundir.guard_fs("create the run directory", run_dir):
            run_dir.mkdir(parents=True, exist_ok=True)
            write_tasks(run_dir / rundir.TASKS, tasks)
            manifest = rundir.run_manifest(str(cfg.run_id), cfg.model_dump(mode="json"), envs, len(tasks),
                                           cfg.repeats)
            manifest["settings"] = effective_settings(cfg, sources, settings, envs=[load_env_class(n) for n in envs])
            rundir.write_json_atomic(run_dir / rundir.RUN_JSON, manifest)
    records, _ = read_journal(run_dir / rundir.JOURNAL, missing_ok=True)
    pending, already = plan(tasks, cfg.repeats, records, cfg.max_attempts)
    if resumed and pending:
        await _models_reachable(cfg, [task for task, _, _ in pending])
    first_seq = len(records)  # the index the report gives the first record collected now
    del records
    if on_start:
        on_start(len(tasks) * cfg.repeats, already)
    from palaestra.report import TranscriptCache, write_report

    # The report's transcripts: of the records collected now, encoded as each is journaled (``live``);
    # of earlier ones, as the read-back expands them (``transcripts``).
    transcripts, live = TranscriptCache(), TranscriptCache()
    written: Written | None = None
    if pending:
        if cfg.cluster:  # the same loop, run by worker processes here or worker actors on Ray (cluster/)
            from palaestra.cluster import cluster_collector

            await cluster_collector(cfg, run_dir, tasks, on_rollout=on_rollout).collect(pending)
        else:
            collector = Collector(cfg, run_dir, tasks, on_rollout=on_rollout,
                                  on_journaled=lambda i, full: live.add(first_seq + i, full))
            await collector.collect(pending)
            written = collector.written
    with gc_paused():  # the read-back is a heap of acyclic JSON trees: collections would only re-walk it
        # one read of the journal feeds metrics and report; this run's own records come from memory
        journal = read_run_journal(run_dir / rundir.JOURNAL, on_expanded=transcripts.add, written=written)
        if journal.kept_from == first_seq:  # else live's numbering is not the journal's: the report encodes them
            transcripts.merge(live)
        metrics = write_metrics(run_dir, tasks, cfg.repeats, cfg.model_prices, journal=journal)
        journal.rollouts.clear()  # the report reads records and rows only: free the validated copies (peak RSS)
        try:
            write_report(run_dir, journal=journal, transcripts=transcripts,
                         expected=expected_counts(tasks, cfg.repeats), metrics=metrics)
        except Exception as exc:  # the run's data is safe in the journal; a report bug must not fail the run
            log.warning("could not write report.html for %s: %s: %s", run_dir, type(exc).__name__, exc)
    unreadable = list(metrics.get("journal_problems") or []) + list(metrics.get("invalid_records") or [])
    return RunResult(run_dir, metrics, len(pending), skipped, already, time.perf_counter() - t0,
                     status=run_status(metrics, cfg.min_coverage), journal_problems=unreadable)
