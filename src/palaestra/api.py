"""The public Python API: ``evaluate`` (what ``palaestra eval run`` does, returning a typed result) and
``collect`` (scored rollouts, or groups of the k rollouts of one task, streamed to a trainer).

Both are thin: ``evaluate`` resolves its options exactly as the CLI does (``RunConfig``: defaults <
``PALAESTRA_*`` settings < run file < arguments) and runs ``orchestrator.run_eval``; ``collect``
submits one job to the trainer-facing ``train.RolloutService`` and streams what it delivers. The CLI's
``eval run`` is a layer over ``evaluate_async``, so a script, a notebook and the command line get the
same run from the same options.

Refusals (bad options, invalid rows, a run directory that cannot be written: the CLI's exit 2) raise a
``PalaestraError`` with a hint; a run that went ahead is never an exception, whatever it scored:
``EvalResult.status`` says complete, incomplete or failed, and ``exit_code`` is what the CLI exits with.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import tempfile
from collections.abc import AsyncGenerator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, cast, overload

from palaestra.core.errors import ConfigError
from palaestra.core.records import Rollout, Task
from palaestra.rollout.config import RunConfig, RunEntry

if TYPE_CHECKING:
    from palaestra.metrics.status import RunStatus
    from palaestra.models.base import ModelBackend
    from palaestra.settings import Settings
    from palaestra.train.service_types import Group, StragglerPolicy

__all__ = ["EvalResult", "collect", "collect_sync", "evaluate", "evaluate_async", "resolve_run"]

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")
TaskLike = Task | dict[str, Any]
OnStart = Callable[[int, int], None]
OnRollout = Callable[[Rollout, bool], None]
INPUT_FILE = "input.jsonl"  # in-memory tasks are written here, in the run directory, and checked like a file


@dataclass(frozen=True)
class EvalResult:
    """What one evaluation did. ``status``: ``complete`` (coverage at least ``min_coverage``),
    ``incomplete`` (below it) or ``failed`` (nothing scored); ``exit_code`` (0, 3, 4) is the CLI's.
    ``failures`` counts the failed (task, repeat) slots by kind (model, environment, sandbox, ...):
    an infrastructure failure is counted there, never as a reward of 0."""

    run_dir: Path
    status: Literal["complete", "incomplete", "failed"]
    exit_code: int
    metrics: dict[str, Any]
    failures: dict[str, int]
    skipped_rows: list[str]
    collected: int
    resumed: int
    wall_s: float
    journal_problems: list[str]
    config: RunConfig
    verdict: RunStatus = field(repr=False)

    @property
    def mean_reward(self) -> float | None:
        """Mean reward over the scored rollouts (None when none scored)."""
        value = (self.metrics.get("overall") or {}).get("mean_reward")
        return None if value is None else float(value)

    @property
    def coverage(self) -> float | None:
        """Scored (task, repeat) slots / expected slots."""
        value = (self.metrics.get("overall") or {}).get("coverage")
        return None if value is None else float(value)

    @property
    def ok(self) -> bool:
        return self.status == "complete"

    def lines(self) -> list[str]:
        """The verdict as the CLI prints it: the status line, then each failure kind with advice."""
        return self.verdict.lines()


def resolve_run(options: dict[str, Any], config_file: str | Path | None = None, resume: str | Path | None = None,
                settings: Settings | None = None) -> tuple[RunConfig, dict[str, str]]:
    """Options (None = not given) over a run file over ``settings`` over defaults, as ``eval run``
    resolves its flags; ``resume`` takes the run directory's recorded config as the base and pins ``out``
    to it. Returns the config and where each value came from."""
    from palaestra.rollout.config import resolve
    from palaestra.rollout.rundir import RUN_JSON, read_manifest

    unknown = sorted(set(options) - set(RunConfig.model_fields))
    if unknown:
        raise ConfigError(f"unknown run option(s) {', '.join(unknown)}",
                          hint=f"known: {', '.join(RunConfig.model_fields)}")
    flags = {k: v for k, v in options.items() if v is not None}
    if resume is not None:
        if not (Path(resume) / RUN_JSON).is_file():
            raise ConfigError(f"{resume} is not a run directory (no {RUN_JSON})",
                              hint="give the --out directory of an earlier run")
        base = read_manifest(Path(resume))["config"]
        flags = {**{k: v for k, v in base.items() if v is not None}, **flags, "out": str(resume)}
    return resolve(flags, str(config_file) if config_file is not None else None, settings)


def _write_input(tasks: Sequence[TaskLike], directory: Path) -> Path:
    """In-memory tasks as a JSONL task file, so they are parsed and checked exactly like ``--input``."""
    import orjson

    from palaestra.rollout import rundir

    path = directory / INPUT_FILE
    with rundir.guard_fs("write the tasks to", path):
        directory.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            for t in tasks:
                row = t.model_dump(mode="json", exclude_none=True) if isinstance(t, Task) else dict(t)
                fh.write(orjson.dumps(row) + b"\n")
    return path


async def evaluate_async(
    tasks: Sequence[TaskLike] | str | Path | None = None,
    *,
    env: str | None = None,
    model: str | None = None,
    agent: str | None = None,
    k: int | None = None,
    repeats: int | None = None,
    concurrency: int | None = None,
    out: str | Path | None = None,
    limit: int | None = None,
    min_coverage: float | None = None,
    input: str | Path | None = None,
    model_name: str | None = None,
    api_key_env: str | None = None,
    api_key_file: str | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    capture_tokens: bool | None = None,
    seed: int | None = None,
    max_attempts: int | None = None,
    deadline_s: float | None = None,
    placement: str | None = None,
    skip_invalid: bool | None = None,
    max_rollouts: int | None = None,
    max_steps: int | None = None,
    models: dict[str, str] | None = None,
    model_prices: dict[str, float] | None = None,
    entries: list[RunEntry | dict[str, Any]] | None = None,
    cluster: str | None = None,
    config: RunConfig | str | Path | None = None,
    resume: str | Path | None = None,
    settings: Settings | None = None,
    on_start: OnStart | None = None,
    on_rollout: OnRollout | None = None,
    config_sources: dict[str, str] | None = None,
    **more: Any,
) -> EvalResult:
    """Evaluate a model and agent on tasks, as ``palaestra eval run`` does, and return the result.

    ``tasks``: a list of ``Task`` objects or task rows (dicts), or a task file path; or leave it out and
    give ``env`` (its bundled tasks) or ``input``. Every other option is the ``eval run`` flag of the
    same name (``k`` is ``--repeats``), and ``**more`` takes any other ``RunConfig`` field by name
    (``sandbox``, ``judge_model``, ...). ``config`` is a run file (or a ``RunConfig``), ``resume`` a run
    directory to finish; ``settings`` the ``PALAESTRA_*`` settings (read from the environment when not
    given, as the CLI does); ``on_start(total, already_scored)`` and ``on_rollout(rollout, final)``
    report progress. Re-running with the same ``out`` resumes. Writes nothing to the process environment.
    ``config_sources``: with a resolved ``RunConfig``, where each of its values came from (for run.json's
    ``settings``; ``resolve_run`` returns it)."""
    from palaestra.orchestrator import run_eval

    if k is not None and repeats is not None and k != repeats:
        raise ConfigError(f"k={k} and repeats={repeats} disagree", hint="give one of them: they are the same option")
    in_memory = tasks is not None and not isinstance(tasks, (str, Path))
    if tasks is not None and not in_memory:
        if input is not None:
            raise ConfigError("tasks and input both name a task file", hint="give one of them")
        input = tasks  # type: ignore[assignment]  # a path given positionally
    options: dict[str, Any] = {
        "input": None if input is None else str(input), "env": env, "limit": limit,
        "repeats": repeats if repeats is not None else k, "concurrency": concurrency, "model": model,
        "model_name": model_name, "api_key_env": api_key_env, "api_key_file": api_key_file, "agent": agent,
        "out": None if out is None else str(out), "temperature": temperature, "max_tokens": max_tokens,
        "capture_tokens": capture_tokens, "seed": seed, "max_attempts": max_attempts, "deadline_s": deadline_s,
        "placement": placement, "skip_invalid": skip_invalid, "min_coverage": min_coverage,
        "max_rollouts": max_rollouts, "max_steps": max_steps, "models": models, "model_prices": model_prices,
        "entries": [e.model_dump() if isinstance(e, RunEntry) else e for e in entries] if entries is not None else None,
        "cluster": cluster, **more,
    }
    if isinstance(config, RunConfig):  # resolved already (the CLI's case): arguments still override it
        if resume is not None:
            raise ConfigError("resume with a RunConfig: give its options instead", hint="or set config.out to the run")
        unknown = sorted(set(options) - set(RunConfig.model_fields))
        if unknown:
            raise ConfigError(f"unknown run option(s) {', '.join(unknown)}")
        given = {n: v for n, v in options.items() if v is not None}
        cfg = RunConfig.model_validate({**RunConfig.model_dump(config), **given})
        sources = {**(config_sources or {}), **{n: "argument" for n in given}}
    else:
        if settings is None:
            from palaestra.settings import Settings

            settings = Settings.from_env()  # the API is an edge: its one read of the environment
        cfg, sources = resolve_run(options, config, resume, settings)
    if in_memory:
        if cfg.input is not None or cfg.entries:
            raise ConfigError("tasks given both as a list and as input/entries", hint="give one of them")
        from palaestra.rollout import rundir

        run_dir = Path(cfg.out) if cfg.out else rundir.default_out(cfg.env)
        if not (run_dir / rundir.RUN_JSON).is_file():  # resuming: the run's tasks.jsonl is the truth
            _write_input(list(tasks or []), run_dir)  # type: ignore[arg-type]
        cfg = cfg.model_copy(update={"out": str(run_dir), "input": str(run_dir / INPUT_FILE)})
    result = await run_eval(cfg, on_start=on_start, on_rollout=on_rollout, settings=settings, sources=sources)
    return _result(cfg, result)


def _result(cfg: RunConfig, result: Any) -> EvalResult:
    from palaestra.metrics.status import run_status

    verdict = result.status if result.status is not None else run_status(result.metrics, cfg.min_coverage)
    failed = (result.metrics.get("overall") or {}).get("n_failed") or {}
    status = cast(Literal["complete", "incomplete", "failed"], verdict.status)
    return EvalResult(run_dir=result.run_dir, status=status, exit_code=verdict.exit_code,
                      metrics=result.metrics, failures={str(k): int(v) for k, v in failed.items()},
                      skipped_rows=list(result.skipped_rows), collected=result.collected, resumed=result.resumed,
                      wall_s=result.wall_s, journal_problems=list(result.journal_problems), config=cfg,
                      verdict=verdict)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code. Inside a running event loop (a Jupyter cell)
    ``asyncio.run`` is refused, so the coroutine then runs on a loop of its own in a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="palaestra-evaluate") as pool:
        return pool.submit(asyncio.run, coro).result()


def _blocking(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """The synchronous twin of a coroutine function, with the same (typed) signature."""
    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(fn(*args, **kwargs))
    return run


evaluate = _blocking(evaluate_async)
evaluate.__name__ = evaluate.__qualname__ = "evaluate"
evaluate.__doc__ = (evaluate_async.__doc__ or "") + """

    This is the blocking form, for scripts and notebooks; ``evaluate_async`` is the coroutine. Inside a
    running event loop (a Jupyter cell) it runs on a loop of its own in a worker thread, and the
    callbacks are called from there."""


def _collect_config(tasks: Sequence[TaskLike] | None, options: dict[str, Any], scratch: Path
                    ) -> tuple[RunConfig, list[Task], list[str]]:
    from palaestra.rollout.selection import select_tasks

    not_here = sorted(set(options) & {"out", "min_coverage", "max_attempts", "max_rollouts", "cluster", "entries",
                                      "models", "model_prices", "repeats", "concurrency"})
    if not_here:
        raise ConfigError(f"collect() does not take {', '.join(not_here)}",
                          hint="use k for the group size and max_in_flight for concurrency; evaluate() runs "
                               "journaled evaluations")
    if tasks is not None:
        if options.get("input") is not None:
            raise ConfigError("tasks and input both given", hint="give one of them")
        options = {**options, "input": str(_write_input(list(tasks), scratch))}
    cfg, _ = resolve_run(options)
    selected, skipped = select_tasks(cfg)
    if not selected:
        raise ConfigError("no tasks to collect" + (f" ({len(skipped)} invalid row(s) skipped)" if skipped else ""),
                          hint="give tasks, env or input")
    for line in skipped:
        log.warning("collect: skipped invalid row %s", line)
    return cfg, selected, skipped


def _sampling(cfg: RunConfig) -> dict[str, Any]:
    """The sampling options of every request; the job turns ``seed`` into seed + member index."""
    s: dict[str, Any] = {}
    for name in ("temperature", "max_tokens", "seed"):
        if getattr(cfg, name) is not None:
            s[name] = getattr(cfg, name)
    if cfg.model_name:
        s["model"] = cfg.model_name
    return s


async def _groups(tasks: Sequence[TaskLike] | None, k: int, max_in_flight: int, backend: ModelBackend | None,
                  group_deadline_s: float | None, straggler_policy: StragglerPolicy,
                  options: dict[str, Any]) -> AsyncGenerator[Group, None]:
    from palaestra.core.secrets import redact_url
    from palaestra.models.factory import make_backend
    from palaestra.rollout.models import needs_reference
    from palaestra.server.continuation import with_continuation
    from palaestra.train.rollout_service import RolloutService
    from palaestra.train.service_types import JobSpec, PolicyEndpoint

    if k < 1 or max_in_flight < 1:
        raise ConfigError(f"k={k} and max_in_flight={max_in_flight} must be at least 1")
    with tempfile.TemporaryDirectory(prefix="palaestra-collect-") as scratch:
        cfg, selected, _ = _collect_config(tasks, options, Path(scratch))
    own = backend is None
    if backend is None:
        backend = with_continuation(make_backend(
            cfg.model, model_name=cfg.model_name, api_key_env=cfg.api_key_env, api_key_file=cfg.api_key_file,
            capture_tokens=cfg.capture_tokens, seed=cfg.seed or 0, max_concurrency=max_in_flight))
    label = redact_url(cfg.model) if own else str(getattr(backend, "name", "") or type(backend).__name__)
    groups_in_flight = max(1, max_in_flight // k)
    spec = JobSpec.model_validate({
        "tasks": selected, "group_size": k, "policy": PolicyEndpoint.model_validate({"base_url": label,
                                                                                        "model": label}),
        "sampling": _sampling(cfg), "agent": cfg.agent, "max_steps": cfg.max_steps, "placement": cfg.placement,
        "rollout_deadline_s": cfg.deadline_s, "group_deadline_s": group_deadline_s,
        "straggler_policy": straggler_policy, "max_groups_in_flight": groups_in_flight,
        "max_buffered_groups": 2 * groups_in_flight})
    service = RolloutService()
    try:
        job = await service.submit(spec, backend=backend, with_reference=own and needs_reference(cfg.model))
        async for group in job:
            yield group
    finally:
        await service.aclose()
        if own:
            await backend.aclose()


@overload
def collect(tasks: Sequence[TaskLike] | None = None, *, k: int = 1, groups: Literal[False] = False,
            max_in_flight: int = 64, backend: ModelBackend | None = None, group_deadline_s: float | None = None,
            straggler_policy: StragglerPolicy = "drop", **options: Any) -> AsyncGenerator[Rollout, None]: ...
@overload
def collect(tasks: Sequence[TaskLike] | None = None, *, k: int = 1, groups: Literal[True],
            max_in_flight: int = 64, backend: ModelBackend | None = None, group_deadline_s: float | None = None,
            straggler_policy: StragglerPolicy = "drop", **options: Any) -> AsyncGenerator[Group, None]: ...


def collect(tasks: Sequence[TaskLike] | None = None, *, k: int = 1, groups: bool = False, max_in_flight: int = 64,
            backend: ModelBackend | None = None, group_deadline_s: float | None = None,
            straggler_policy: StragglerPolicy = "drop", **options: Any
            ) -> AsyncGenerator[Rollout, None] | AsyncGenerator[Group, None]:
    """Stream rollouts for a trainer: every task is sampled ``k`` times (one group), with at most
    ``max_in_flight`` rollouts running. Yields each group's rollouts as its group finishes, or, with
    ``groups=True``, the ``Group`` (the k rollouts of one task, in member order, for GRPO-style
    baselines). Nothing is journaled; a rollout whose infrastructure failed has outcome failed(kind) and
    no reward (never 0).

    ``tasks`` (Task objects or rows) or ``env``/``input``/``limit`` choose the tasks, checked like a run's;
    ``model`` (a spec, as for ``evaluate``) or ``backend`` (a live ``ModelBackend``, e.g. one sharing the
    trainer's weights; it stays the caller's to close) answers; ``agent``, ``temperature``,
    ``max_tokens``, ``seed`` (member i samples with seed + i), ``max_steps``, ``deadline_s`` and
    ``placement`` mean what they mean for ``evaluate``. ``group_deadline_s`` and ``straggler_policy``
    bound slow groups (``train.service_types.JobSpec``). Leaving the loop early cancels what is running."""
    stream = _groups(tasks, k, max_in_flight, backend, group_deadline_s, straggler_policy, options)
    return stream if groups else _members(stream)


async def _members(stream: AsyncGenerator[Group, None]) -> AsyncGenerator[Rollout, None]:
    try:
        async for group in stream:
            for i, rollout in enumerate(group.rollouts):
                if i not in group.padded:  # a stand-in for a cancelled straggler is no rollout
                    yield rollout
    finally:
        await stream.aclose()


def collect_sync(tasks: Sequence[TaskLike] | None = None, *, k: int = 1, groups: bool = False,
                 **options: Any) -> list[Any]:
    """``collect``, blocking, for synchronous callers (a script, a trainer's rollout hook): every group is
    collected, then all are returned as one list, of rollouts or, with ``groups=True``, of ``Group``s in
    the order the tasks were given (``collect`` streams them as they finish). Same options as ``collect``."""
    async def gather() -> list[Any]:
        stream: AsyncGenerator[Any, None] = collect(tasks, k=k, groups=True, **options)
        found = [g async for g in stream]
        found.sort(key=lambda g: g.group_id)
        return found if groups else [r for g in found for i, r in enumerate(g.rollouts) if i not in g.padded]
    return run_sync(gather())
