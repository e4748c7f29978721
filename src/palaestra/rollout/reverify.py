"""``eval reverify``: re-score stored trajectories with the current verifier — no model calls.

Each stored trajectory is replayed on a fresh session (its tool calls re-run in order) and verified.
The original journal is never touched: the re-scored records, the new metrics and a diff of every
changed verdict are written beside it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from palaestra.core.errors import InfraError, PalaestraError
from palaestra.core.records import Outcome, Rollout, Task
from palaestra.metrics.status import RunStatus, run_status
from palaestra.metrics.summary import compute_metrics
from palaestra.placement import mount_env
from palaestra.rollout import rundir
from palaestra.rollout.compact import compact_rollout
from palaestra.rollout.config import RUN_SETTINGS, RunConfig, env_options
from palaestra.rollout.journal import encode_record
from palaestra.rollout.tasks import read_tasks

REVERIFIED = "rollouts.reverified.jsonl"
DIFF = "reverify_diff.jsonl"
METRICS = "metrics.reverify.json"


@dataclass
class ReverifyResult:
    metrics: dict[str, Any]
    checked: int = 0
    failed: int = 0
    changed: list[dict[str, Any]] = field(default_factory=list)
    diff_path: Path = Path()
    journal_problems: list[str] = field(default_factory=list)  # lines of the journal that could not be read
    status: RunStatus | None = None  # coverage after re-scoring, judged as ``eval run`` judges a run

    @property
    def exit_code(self) -> int:
        return self.status.exit_code if self.status is not None else 0


async def reverify_run(run_dir: Path, *, placement: str = "inprocess", concurrency: int = 32,
                       min_coverage: float = 1.0) -> ReverifyResult:
    if not (run_dir / rundir.TASKS).is_file():
        raise PalaestraError(f"{run_dir} is not a run directory (no {rundir.TASKS})", kind="config",
                             hint="give the --out directory of a run")
    tasks = {t.id: t for t in read_tasks(run_dir / rundir.TASKS)}
    from palaestra.rollout.results import read_rollouts

    _, rollouts, problems, invalid = read_rollouts(run_dir / rundir.JOURNAL)
    # the environments get the run's own settings (its sandbox, scoring, judge, run id), as recorded in run.json
    recorded = rundir.read_manifest(run_dir).get("config", {}) if (run_dir / rundir.RUN_JSON).is_file() else {}
    options = env_options(RunConfig.model_validate(
        {k: recorded[k] for k in (*RUN_SETTINGS, "run_id") if recorded.get(k) is not None}))
    envs = {name: await mount_env(name, placement, options) for name in sorted({r.env for r in rollouts})}
    sem = asyncio.Semaphore(concurrency)
    result = ReverifyResult(metrics={}, journal_problems=problems + invalid)

    async def one(r: Rollout) -> Rollout:
        recheck = r.outcome.status == "scored" or r.outcome.kind == "verifier"
        task: Task | None = tasks.get(r.task_id)
        if not recheck or task is None:
            return r
        async with sem:
            result.checked += 1
            new = r.model_copy(deep=True)
            try:
                new.verdict = await envs[r.env].client.verify_stateless(task, r.trajectory)
                new.outcome = Outcome.scored()
            except InfraError as exc:
                result.failed += 1
                new.verdict, new.outcome = None, Outcome.failed(exc.failure, str(exc))
            except PalaestraError as exc:
                result.failed += 1
                new.verdict, new.outcome = None, Outcome.failed("verifier", str(exc))
        before = r.verdict.model_dump(mode="json") if r.verdict else None
        after = new.verdict.model_dump(mode="json") if new.verdict else None
        if before != after or r.outcome.status != new.outcome.status:
            result.changed.append({"rollout_id": r.rollout_id, "task_id": r.task_id, "repeat": r.repeat,
                                   "attempt": r.attempt, "before": before, "after": after,
                                   "outcome_before": r.outcome.model_dump(mode="json"),
                                   "outcome_after": new.outcome.model_dump(mode="json")})
        return new

    try:
        rescored = await asyncio.gather(*(one(r) for r in rollouts))
    finally:
        for m in envs.values():
            await m.stop()
    result.diff_path = run_dir / DIFF
    with rundir.guard_fs("write the re-verified records into", run_dir):
        with (run_dir / REVERIFIED).open("wb") as fh:
            for r in rescored:
                # compact like the journal (rollout/compact.py): the task is referenced, not copied
                fh.write(encode_record(compact_rollout(r, tasks.get(r.task_id))))
        with result.diff_path.open("wb") as fh:
            for change in result.changed:
                fh.write(orjson.dumps(change) + b"\n")
    repeats = int(rundir.read_manifest(run_dir).get("repeats", 1))
    result.metrics = compute_metrics(rescored, {(t.env, t.id): repeats for t in tasks.values()})
    result.metrics["invalid_records"] = invalid
    result.metrics["journal_unreadable"] = len(problems) + len(invalid)
    if problems:
        result.metrics["journal_problems"] = problems
    with rundir.guard_fs("write metrics to", run_dir / METRICS):
        rundir.write_json_atomic(run_dir / METRICS, result.metrics)
    result.status = run_status(result.metrics, min_coverage)
    return result
