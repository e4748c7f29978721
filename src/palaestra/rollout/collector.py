"""The collector: collect rollouts for every (task, repeat) at high concurrency, journal each attempt
(fsynced before it counts), retry infrastructure failures, and resume a killed run exactly."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from palaestra.agents.base import Agent
from palaestra.agents.registry import make_agent
from palaestra.agents.remote import RunLinks, is_remote, link_remote_agents, placement_for
from palaestra.client.env_client import EnvClient
from palaestra.core.environment import Environment
from palaestra.core.errors import ConfigError
from palaestra.core.records import Rollout, Task
from palaestra.core.secrets import redact_url
from palaestra.envs.registry import load_env_class
from palaestra.models.router import RouteSpec
from palaestra.placement import MountedEnv, mount_env
from palaestra.rollout import rundir
from palaestra.rollout.cascade import run_cascade
from palaestra.rollout.compact import journal_forms
from palaestra.rollout.config import RunConfig, env_options
from palaestra.rollout.journal import Journal, Written
from palaestra.rollout.models import ModelPool, needs_reference
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy

ProgressFn = Callable[[Rollout, bool], None]
# Sees each attempt as journaled, in full (``rollout.compact.journal_forms``), with the index
# ``Journal.append`` gave it.
JournaledFn = Callable[[int, dict[str, Any]], None]
log = logging.getLogger(__name__)


class Appender(Protocol):
    """Where attempts are journaled: the run's ``Journal``, or (in a worker process of ``--cluster local``)
    a stand-in that forwards each record to the one process that writes the journal and returns once
    that process has fsynced it."""

    async def append(self, record: Any, *, line: bytes | None = None) -> Any: ...


# Outcome messages of failures that the same attempt would hit again: a row its environment refuses, a
# config error. The runner writes them as "<error kind>: ..."; retrying them only wastes attempts.
DETERMINISTIC_KINDS = ("invalid_task", "config")


class Collector:
    """Owns the run's resources (mounted environments, model proxies, agents) and the journal.

    ``on_journaled``: sees every attempt journaled, in full, with its index among this collection's
    records. Given, the journal also keeps what it writes, and ``written`` holds it once ``collect``
    returns: the end of a run then takes those records from memory, checked against the file's bytes
    (``rollout.journal_read.read_written``), instead of parsing them back."""

    def __init__(self, cfg: RunConfig, run_dir: Path, tasks: list[Task], *, on_rollout: ProgressFn | None = None,
                 on_journaled: JournaledFn | None = None):
        self.cfg = cfg
        self.run_dir = run_dir
        self.tasks = tasks
        self.on_rollout = on_rollout
        self.on_journaled = on_journaled
        self.written: Written | None = None
        self.envs: dict[str, MountedEnv] = {}
        # An environment whose session cap is below the run's concurrency: rollouts queue here for a free
        # session (back-pressure) instead of opening one the store would refuse.
        self.gates: dict[str, asyncio.Semaphore] = {}
        self.models = ModelPool(cfg)
        self._models: dict[str, tuple[RouteSpec | None, ModelProxy | None, str, bool]] = {}
        self.agents: dict[str, Agent] = {}
        self.links: RunLinks | None = None

    def model_spec(self, task: Task) -> str:
        return task.model or self.cfg.model

    def _model(self, spec: str) -> tuple[RouteSpec | None, ModelProxy | None, str, bool]:
        """What every rollout of ``spec`` needs from the model pool, worked out once per spec rather than
        per attempt (parsing the route and redacting the URL cost more than the rest of the lookup):
        its route, its proxy (None for a cascade, which picks one per step), its shown name, and whether
        its rollouts fetch the reference first."""
        hit = self._models.get(spec)
        if hit is None:
            route = self.models.route(spec)
            proxy = None if route is not None and route.strategy == "cascade" else self.models.proxy(spec)
            hit = (route, proxy, redact_url(spec), needs_reference(self.models.resolve(spec)))
            self._models[spec] = hit
        return hit

    async def _setup(self) -> None:
        # A remote agent (agent: remote:URL) calls its environment over HTTP: that one runs as a local server.
        # (agent spec, env) pairs first: a spec is parsed once, not once per task
        pairs = {(t.agent or self.cfg.agent, t.env) for t in self.tasks}
        remote = {spec for spec in {spec for spec, _ in pairs} if is_remote(spec)}
        remote_envs = {env for spec, env in pairs if spec in remote}
        for name in sorted({env for _, env in pairs}):
            cap = session_cap(self.cfg, load_env_class(name))
            self.envs[name] = await mount_env(name, placement_for(self.cfg.placement, name in remote_envs),
                                              env_options(self.cfg), max_sessions=cap)
            if cap < self.cfg.concurrency:
                self.gates[name] = asyncio.Semaphore(cap)
        self.models.prepare({self.model_spec(t) for t in self.tasks})
        for name in sorted({spec for spec, _ in pairs}):
            self.agents[name] = make_agent(name, max_steps=self.cfg.max_steps)
        self.links = link_remote_agents(self.agents, self.envs, deadline_s=self.cfg.deadline_s)

    async def _teardown(self) -> None:
        if self.links is not None:  # the remote agents' clients and the model proxy faces served for them
            await self.links.aclose()
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
        if self.cfg.tool_choice is not None:  # the runner applies it to the requests that offer tools
            s["tool_choice"] = self.cfg.tool_choice
        if self.cfg.model_name:
            s["model"] = self.cfg.model_name
        return s

    async def _one(self, task: Task, repeat: int, first_attempt: int, journal: Appender) -> None:
        """Attempts until scored or out of attempts; each attempt is journaled before the next starts."""
        spec = self.model_spec(task)
        route, proxy, shown, with_reference = self._model(spec)
        agent = self.agents[task.agent or self.cfg.agent]
        attempt = _Attempt(self, task, repeat, spec, self.envs[task.env].client, agent, route, proxy, shown,
                           with_reference, self.gates.get(task.env))
        await attempts_until_scored(attempt, first_attempt, self.cfg.max_attempts, journal, self.on_rollout,
                                    task=task, on_journaled=self.on_journaled)

    async def collect(self, pending: list[tuple[Task, int, int]]) -> None:
        await self._setup()
        try:
            journal = Journal(self.run_dir / rundir.JOURNAL, keep=self.on_journaled is not None)
            async with journal:
                await drain(pending, self.cfg.concurrency, lambda t, r, a: self._one(t, r, a, journal))
            self.written = journal.written
        finally:
            await self._teardown()


@dataclass(slots=True)
class _Attempt:
    """``attempt(n)``: attempt ``n`` of one (task, repeat), with what every attempt of it needs looked up
    once. One small object, where closures over the same names made a cell for each and two functions,
    all held by every rollout in flight for its whole life (65,000 in flight: ``bench/load.py``)."""

    collector: Collector
    task: Task
    repeat: int
    spec: str
    env: EnvClient
    agent: Agent
    route: RouteSpec | None
    proxy: ModelProxy | None
    shown: str
    with_reference: bool
    gate: asyncio.Semaphore | None

    async def __call__(self, n: int) -> Rollout:
        if self.gate is None:
            return await self._rollout(n)
        async with self.gate:  # waited for outside the rollout's deadline: queueing is not the rollout's time
            return await self._rollout(n)

    def _rollout(self, n: int) -> Coroutine[Any, Any, Rollout]:
        """The attempt's coroutine (not a coroutine itself: one fewer frame held while it runs)."""
        c = self.collector
        kw: dict[str, Any] = {"env": self.env, "agent": self.agent, "repeat": self.repeat, "attempt": n,
                              "deadline_s": c.cfg.deadline_s, "sampling": c._sampling(self.repeat)}
        if self.proxy is None:
            assert self.route is not None
            return run_cascade(self.task, self.route, self.spec, c.models, **kw)
        return run_rollout(self.task, proxy=self.proxy, model_name=self.shown, with_reference=self.with_reference,
                           **kw)


async def attempts_until_scored(attempt: Callable[[int], Awaitable[Rollout]], first_attempt: int, max_attempts: int,
                                journal: Appender, on_rollout: ProgressFn | None, *,
                                task: Task | None = None, on_journaled: JournaledFn | None = None) -> None:
    """Run attempts ``first_attempt, ...`` of one (task, repeat) until one is scored or none is left; each is
    journaled before the next starts, with a short backoff between them. Shared by the local and the Ray
    collectors, which differ only in how one attempt runs. Records are journaled compact, referencing
    ``task`` (stored once, in tasks.jsonl) instead of copying its input (rollout/compact.py);
    ``on_journaled`` sees each in full once it is (``Collector``)."""
    for n in range(first_attempt, max_attempts):
        rollout = await attempt(n)
        record, full, line = journal_forms(rollout, task)
        index = await journal.append(record, line=line)
        if on_journaled is not None and full is not None and type(index) is int:
            on_journaled(index, full)
        done = rollout.outcome.status == "scored" or is_deterministic(rollout)
        if on_rollout:
            on_rollout(rollout, done or n + 1 >= max_attempts)
        if done:
            return
        await asyncio.sleep(min(0.05 * 2 ** (n - first_attempt), 2.0))


def session_cap(cfg: RunConfig, env_class: type[Environment]) -> int:
    """How many sessions one environment of this run holds at once. A flag or run-file field
    (``max_sessions``) decides; otherwise the environment's own cap, except that the generic default of
    ``Environment`` (10,000, not a limit the environment chose) is raised to the run's concurrency, so
    65,000 rollouts in flight do not meet a store that refuses all but 10,000 of them."""
    if cfg.max_sessions is not None:
        return cfg.max_sessions
    own = env_class.max_sessions
    return max(own, cfg.concurrency) if own == Environment.max_sessions else own


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
            tried = attempts.get(key, 0)
            if key not in scored and tried < max_attempts:
                pending.append((t, rep, tried))
    return pending, len(scored)


