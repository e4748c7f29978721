"""``eval run``: collect rollouts for every (task, repeat) at high concurrency, journal each attempt
(fsynced before it counts), retry infrastructure failures, and resume a killed run exactly."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaestra.agents.base import Agent
from palaestra.agents.registry import make_agent
from palaestra.client.env_client import EnvClient
from palaestra.core.errors import ConfigError, InvalidTask
from palaestra.core.records import Rollout, Task
from palaestra.core.secrets import redact_url
from palaestra.envs.registry import load_env_class, register_alias, spec_for
from palaestra.metrics.summary import RunStatus, compute_metrics, run_status
from palaestra.metrics.usage import model_usage
from palaestra.placement import MountedEnv, mount_env
from palaestra.rollout import rundir
from palaestra.rollout.cascade import run_cascade
from palaestra.rollout.compact import CompactError, RunTasks, compact_rollout, expand_record
from palaestra.rollout.config import RunConfig
from palaestra.rollout.journal import Journal, read_journal
from palaestra.rollout.models import ModelPool, needs_reference
from palaestra.rollout.runner import run_rollout
from palaestra.rollout.selection import select_tasks
from palaestra.rollout.tasks import read_tasks, write_tasks

ProgressFn = Callable[[Rollout, bool], None]
log = logging.getLogger(__name__)


# Outcome messages of failures that the same attempt would hit again: a row its environment refuses, a
# config error. The runner writes them as "<error kind>: ..."; retrying them only wastes attempts.
DETERMINISTIC_KINDS = ("invalid_task", "config")


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


class Collector:
    """Owns the run's resources (mounted environments, model proxies, agents) and the journal."""

    def __init__(self, cfg: RunConfig, run_dir: Path, tasks: list[Task], *, on_rollout: ProgressFn | None = None):
        self.cfg = cfg
        self.run_dir = run_dir
        self.tasks = tasks
        self.on_rollout = on_rollout
        self.envs: dict[str, MountedEnv] = {}
        self.models = ModelPool(cfg)
        self.agents: dict[str, Agent] = {}

    def model_spec(self, task: Task) -> str:
        return task.model or self.cfg.model

    async def _setup(self) -> None:
        for name in sorted({t.env for t in self.tasks}):
            self.envs[name] = await mount_env(name, self.cfg.placement)
        self.models.prepare({self.model_spec(t) for t in self.tasks})
        for name in sorted({t.agent or self.cfg.agent for t in self.tasks}):
            self.agents[name] = make_agent(name, max_steps=self.cfg.max_steps)

    async def _teardown(self) -> None:
        for mounted in self.envs.values():
            await mounted.stop()
        await self.models.aclose()

    def _sampling(self, repeat: int) -> dict[str, Any]:
        s: dict[str, Any] = {}
        if self.cfg.temperature is not None:
            s["temperature"] = self.cfg.temperature
        if self.cfg.max_tokens is not None:
            s["max_tokens"] = self.cfg.max_tokens
        if self.cfg.seed is not None:
            s["seed"] = self.cfg.seed + repeat
        if self.cfg.model_name:
            s["model"] = self.cfg.model_name
        return s

    async def _one(self, task: Task, repeat: int, first_attempt: int, journal: Journal) -> None:
        """Attempts until scored or out of attempts; each attempt is journaled before the next starts."""
        spec = self.model_spec(task)
        env: EnvClient = self.envs[task.env].client
        agent = self.agents[task.agent or self.cfg.agent]
        route = self.models.route(spec)

        async def attempt(n: int) -> Rollout:
            kw: dict[str, Any] = {"env": env, "agent": agent, "repeat": repeat, "attempt": n,
                                  "deadline_s": self.cfg.deadline_s, "sampling": self._sampling(repeat)}
            if route is not None and route.strategy == "cascade":
                return await run_cascade(task, route, spec, self.models, **kw)
            return await run_rollout(task, proxy=self.models.proxy(spec), model_name=redact_url(spec),
                                     with_reference=needs_reference(self.models.resolve(spec)), **kw)

        await attempts_until_scored(attempt, first_attempt, self.cfg.max_attempts, journal, self.on_rollout,
                                    task=task)

    async def collect(self, pending: list[tuple[Task, int, int]]) -> None:
        await self._setup()
        try:
            async with Journal(self.run_dir / rundir.JOURNAL) as journal:
                await drain(pending, self.cfg.concurrency, lambda t, r, a: self._one(t, r, a, journal))
        finally:
            await self._teardown()


async def attempts_until_scored(attempt: Callable[[int], Awaitable[Rollout]], first_attempt: int, max_attempts: int,
                                journal: Journal, on_rollout: ProgressFn | None, *, task: Task | None = None) -> None:
    """Run attempts ``first_attempt, ...`` of one (task, repeat) until one is scored or none is left; each is
    journaled before the next starts, with a short backoff between them. Shared by the local and the Ray
    collectors, which differ only in how one attempt runs. Records are journaled compact, referencing
    ``task`` (stored once, in tasks.jsonl) instead of copying its input (rollout/compact.py)."""
    for n in range(first_attempt, max_attempts):
        rollout = await attempt(n)
        await journal.append(compact_rollout(rollout, task))
        done = rollout.outcome.status == "scored" or is_deterministic(rollout)
        if on_rollout:
            on_rollout(rollout, done or n + 1 >= max_attempts)
        if done:
            return
        await asyncio.sleep(min(0.05 * 2 ** (n - first_attempt), 2.0))


def is_deterministic(rollout: Rollout) -> bool:
    """A failure the next attempt would meet again (an invalid task, a bad config): never retried."""
    message = rollout.outcome.message or ""
    return rollout.outcome.status == "failed" and message.startswith(tuple(f"{k}:" for k in DETERMINISTIC_KINDS))


def check_size(n_tasks: int | None, repeats: int, limit: int) -> None:
    """Refuse an absurd run before anything is planned or allocated: its plan alone would not fit.
    ``n_tasks`` None: the tasks are not read yet, and the repeats alone are over the limit."""
    total = (n_tasks or 1) * repeats
    if total > limit:
        what = (f"{repeats:,} repeats per task" if n_tasks is None
                else f"{n_tasks:,} task(s) × {repeats:,} repeat(s) = {total:,} rollouts")
        raise ConfigError(f"{what} is more than the limit of {limit:,} rollouts; nothing was started",
                          hint="lower -k/--repeats or --limit, or raise --max-rollouts if you mean it")


async def drain(pending: list[tuple[Task, int, int]], concurrency: int,
                one: Callable[[Task, int, int], Coroutine[Any, Any, None]]) -> None:
    """Work through (task, repeat, first attempt) items with at most ``concurrency`` in flight."""
    queue: asyncio.Queue[tuple[Task, int, int]] = asyncio.Queue()
    for item in pending:
        queue.put_nowait(item)

    async def lane() -> None:
        while True:
            try:
                task, repeat, first = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await one(task, repeat, first)

    await run_all_or_none([lane() for _ in range(min(concurrency, len(pending)) or 1)])


async def run_all_or_none(coros: list[Coroutine[Any, Any, None]]) -> None:
    """Run the workers; the first one that fails (a full disk, say) stops them all, so the run ends
    cleanly with that error instead of limping on with rollouts it can no longer record."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            if t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def plan(tasks: list[Task], repeats: int, records: list[dict[str, Any]], max_attempts: int
         ) -> tuple[list[tuple[Task, int, int]], int]:
    """(task, repeat, next attempt) for every slot without a scored record and with attempts left."""
    scored: set[tuple[str, int]] = set()
    attempts: Counter[tuple[str, int]] = Counter()
    for r in records:
        key = (str(r.get("task_id")), int(r.get("repeat", 0)))
        attempts[key] += 1
        if (r.get("outcome") or {}).get("status") == "scored":
            scored.add(key)
    pending = []
    for t in tasks:
        for rep in range(repeats):
            key = (t.id, rep)
            if key not in scored and attempts[key] < max_attempts:
                pending.append((t, rep, attempts[key]))
    return pending, len(scored)


def expected_counts(tasks: list[Task], repeats: int) -> dict[tuple[str, str], int]:
    return {(t.env, t.id): repeats for t in tasks}


def read_rollouts(path: Path) -> tuple[list[dict[str, Any]], list[Rollout], list[str], list[str]]:
    """The journal's records, its valid Rollouts, the lines that are not JSON records (torn, garbage), and
    the records that are JSON but not Rollouts — each problem naming its line, so none is dropped
    silently."""
    lines: list[int] = []
    records, problems = read_journal(path, missing_ok=True, lines=lines)
    rollouts: list[Rollout] = []
    invalid: list[str] = []
    tasks = RunTasks(path.parent / rundir.TASKS)  # compact records reference their task's input
    for lineno, r in zip(lines, records, strict=True):
        try:
            rollouts.append(Rollout.model_validate(expand_record(r, tasks)))
        except CompactError as exc:
            invalid.append(f"{path}:{lineno}: cannot be expanded ({exc}); line skipped")
        except ValueError as exc:
            errors = getattr(exc, "errors", None)
            first = errors()[0] if callable(errors) and errors() else None
            why = f"{'.'.join(map(str, first['loc']))}: {first['msg']}" if first else str(exc)[:200]
            invalid.append(f"{path}:{lineno}: not a Rollout ({why}); line skipped")
    return records, rollouts, problems, invalid


def parse_records(records: list[dict[str, Any]]) -> list[Rollout | dict[str, Any]]:
    """Journal dicts → Rollouts, once; an invalid one stays a dict so compute_metrics can report it."""
    out: list[Rollout | dict[str, Any]] = []
    for r in records:
        try:
            out.append(Rollout.model_validate(r))
        except ValueError:
            out.append(r)
    return out


def env_metrics(rollouts: list[Rollout | dict[str, Any]]) -> dict[str, Any]:
    """Each environment's own metrics hook, over its valid journal records."""
    by_env: dict[str, list[Rollout]] = {}
    for r in rollouts:
        if isinstance(r, Rollout):
            by_env.setdefault(r.env, []).append(r)
    out: dict[str, Any] = {}
    for name, env_rollouts in sorted(by_env.items()):
        try:
            extra = load_env_class(name)().metrics(env_rollouts)
        except Exception as exc:  # a buggy hook must not cost the run its metrics
            extra = {"error": f"{type(exc).__name__}: {exc}"}
        if extra:
            out[name] = extra
    return out


def write_metrics(run_dir: Path, tasks: list[Task], repeats: int,
                  prices: dict[str, float] | None = None) -> dict[str, Any]:
    """Metrics from the journal, written to metrics.json. Every journal line that could not be read is
    counted in ``journal_unreadable`` and described (with its line) in ``journal_problems`` (not JSON)
    or ``invalid_records`` (JSON, not a Rollout)."""
    records, rollouts, problems, invalid = read_rollouts(run_dir / rundir.JOURNAL)
    parsed: list[Rollout | dict[str, Any]] = list(rollouts)
    metrics = compute_metrics(parsed, expected_counts(tasks, repeats))
    metrics["invalid_records"] = invalid
    metrics["journal_unreadable"] = len(problems) + len(invalid)
    metrics["model_usage"] = model_usage(records, prices)
    with_tokens = [r for r in parsed if isinstance(r, Rollout)
                   and any(c.generation_token_ids for c in r.trajectory.model_calls)]
    if with_tokens:  # token fidelity for RL: how many turns extend the previous turn's exact tokens
        from palaestra.train.sequence import drift_summary

        metrics["token_fidelity"] = drift_summary(with_tokens)
    hooks = env_metrics(parsed)
    if hooks:
        metrics["env_metrics"] = hooks
    if problems:
        metrics["journal_problems"] = problems
    with rundir.guard_fs("write metrics to", run_dir / rundir.METRICS):
        rundir.write_json_atomic(run_dir / rundir.METRICS, metrics)
    return metrics


async def run_eval(cfg: RunConfig, *, on_start: Callable[[int, int], None] | None = None,
                   on_rollout: ProgressFn | None = None) -> RunResult:
    """Start or resume the run in ``cfg.out``; return its metrics and the verdict on it.

    Everything that can be known before the first rollout is checked first, so a run that cannot
    succeed costs nothing: every row against its environment (all bad rows in one error), the run's size
    against ``max_rollouts``, and that the run directory can be written. A run that went ahead but did
    not reach ``min_coverage`` is not an exception: ``RunResult.status`` says so, and why."""
    t0 = time.perf_counter()
    if cfg.repeats > cfg.max_rollouts:  # before reading a single row: the answer cannot change
        check_size(None, cfg.repeats, cfg.max_rollouts)
    run_dir = Path(cfg.out) if cfg.out else rundir.default_out(cfg.env)
    skipped: list[str] = []
    if (run_dir / rundir.TASKS).is_file() and (run_dir / rundir.RUN_JSON).is_file():
        with rundir.guard_fs("read the run in", run_dir):
            tasks = read_tasks(run_dir / rundir.TASKS)  # resume: the snapshot is the truth
            manifest_envs = rundir.read_manifest(run_dir).get("envs", {})
        for name, meta in manifest_envs.items():
            register_alias(name, meta.get("spec", name))
        check_size(len(tasks), cfg.repeats, cfg.max_rollouts)
    else:
        tasks, skipped = select_tasks(cfg)
        if not tasks:
            raise InvalidTask("no tasks to run" + (f" ({len(skipped)} invalid row(s) skipped)" if skipped else ""),
                              hint="check --input/--env and --limit")
        check_size(len(tasks), cfg.repeats, cfg.max_rollouts)
        envs = {}
        for name in sorted({t.env for t in tasks}):
            cls = load_env_class(name)
            envs[name] = {"spec": spec_for(name), "version": cls.version, "verifier_hash": cls.verifier_hash()}
            # Grading that cannot work (no judge configured) refuses the run here, before anything is written;
            # what the environment reports (which judge grades) is recorded in run.json.
            envs[name].update(cls().preflight([t for t in tasks if t.env == name]))
        with rundir.guard_fs("create the run directory", run_dir):
            run_dir.mkdir(parents=True, exist_ok=True)
            write_tasks(run_dir / rundir.TASKS, tasks)
            rundir.write_json_atomic(run_dir / rundir.RUN_JSON, rundir.run_manifest(
                uuid.uuid4().hex, cfg.model_dump(mode="json"), envs, len(tasks), cfg.repeats))
    # Sandboxes and child servers label what they create with the run, so a reaper can tell runs apart.
    os.environ.setdefault("PALAESTRA_RUN_ID", str(rundir.read_manifest(run_dir).get("run_id", "")))
    records, _ = read_journal(run_dir / rundir.JOURNAL, missing_ok=True)
    pending, already = plan(tasks, cfg.repeats, records, cfg.max_attempts)
    del records
    if on_start:
        on_start(len(tasks) * cfg.repeats, already)
    if pending:
        if cfg.cluster:  # the same loop, with each attempt run by a worker actor on Ray (cluster/driver.py)
            from palaestra.cluster.driver import RayCollector

            await RayCollector(cfg, run_dir, tasks, on_rollout=on_rollout).collect(pending)
        else:
            await Collector(cfg, run_dir, tasks, on_rollout=on_rollout).collect(pending)
    metrics = write_metrics(run_dir, tasks, cfg.repeats, cfg.model_prices)
    try:
        from palaestra.report import write_report

        write_report(run_dir)
    except Exception as exc:  # the run's data is safe in the journal; a report bug must not fail the run
        log.warning("could not write report.html for %s: %s: %s", run_dir, type(exc).__name__, exc)
    unreadable = list(metrics.get("journal_problems") or []) + list(metrics.get("invalid_records") or [])
    return RunResult(run_dir, metrics, len(pending), skipped, already, time.perf_counter() - t0,
                     status=run_status(metrics, cfg.min_coverage), journal_problems=unreadable)
