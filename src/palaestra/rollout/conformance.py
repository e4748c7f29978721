"""``palaestra env check``: the conformance suite every environment must pass, wherever it runs.

It proves the verifier can award full reward (the oracle plays each task's reference), that doing
nothing earns none, that malformed tool calls get errors, that grading failures come back typed (the
grading contract, core/grading.py), that verify is deterministic and that sessions are freed."""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from palaestra.agents.tool_agent import ToolAgent
from palaestra.client.env_client import EnvClient
from palaestra.core.environment import Environment
from palaestra.core.errors import InfraError, PalaestraError, UnknownSession
from palaestra.core.grading import GradingProbe
from palaestra.core.records import Rollout, Task, Trajectory
from palaestra.models.scripted import ScriptedBackend
from palaestra.placement import mount_env
from palaestra.rollout.runner import run_rollout
from palaestra.server.model_proxy import ModelProxy


@dataclass
class CheckResult:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class CheckReport:
    env: str
    placement: str
    tasks: int
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.results.append(CheckResult(name, ok, detail))


async def _policy_rollouts(env: EnvClient, tasks: list[Task], policy: str, concurrency: int = 16) -> list[Rollout]:
    proxy = ModelProxy(ScriptedBackend(policy))
    agent = ToolAgent()
    sem = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> Rollout:
        async with sem:
            return await run_rollout(task, env=env, agent=agent, proxy=proxy, model_name=f"scripted:{policy}",
                                     with_reference=(policy == "oracle"), deadline_s=120)

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def _fmt_fail(r: Rollout) -> str:
    if r.outcome.status != "scored":
        return f"{r.task_id}: {r.outcome.status}({r.outcome.kind}) {r.outcome.message}"
    assert r.verdict is not None
    return f"{r.task_id}: reward {r.verdict.reward:g} {r.verdict.metadata or ''}"


def _failures(bad: list[Rollout]) -> str:
    return ("; " + "; ".join(map(_fmt_fail, bad[:3]))) if bad else ""


async def _malformed_calls(env: EnvClient, task: Task, tools: list[dict[str, Any]]) -> list[str]:
    """Return problems found; each malformed call must come back as a typed error, not a crash."""
    problems: list[str] = []
    session = await env.open(task)
    try:
        res = await env.call_tool(session.session_id, "__no_such_tool__", {})
        if not res.error or res.error.get("kind") != "unknown_tool":
            problems.append(f"unknown tool answered {res.to_dict()}")
        if tools:
            fn = tools[0]["function"]
            name = fn["name"]
            res = await env.call_tool(session.session_id, name, "{not json")
            if not res.error or res.error.get("kind") != "bad_arguments":
                problems.append(f"non-JSON arguments to '{name}' answered {res.to_dict()}")
            res = await env.call_tool(session.session_id, name, {"__unexpected_field__": 1})
            if not res.error or res.error.get("kind") != "bad_arguments":
                problems.append(f"unexpected field for '{name}' answered {res.to_dict()}")
            props = fn.get("parameters", {}).get("properties", {})
            for pname, prop in props.items():
                if prop.get("type") in ("integer", "number", "boolean", "array", "object"):
                    res = await env.call_tool(session.session_id, name, {pname: "not-a-valid-value-{}"})
                    if not res.error or res.error.get("kind") != "bad_arguments":
                        problems.append(f"wrong type for '{name}.{pname}' answered {res.to_dict()}")
                    break
        try:
            await env.call_tool("no-such-session", tools[0]["function"]["name"] if tools else "x", {})
            problems.append("a call on an unknown session did not fail")
        except PalaestraError:
            pass
    finally:
        await env.close(session.session_id)
    return problems


async def _grading_failures(env: EnvClient, probes: list[GradingProbe]) -> tuple[list[str], list[str]]:
    """(problems, what answered right). Grading that cannot run must raise a typed failure, never answer a
    Verdict: a verify of an unknown session, and each probe the environment offers (e.g. a test-runner
    environment's task whose runner is missing) must come back failed(kind) of the kind it names."""
    problems: list[str] = []
    fine: list[str] = []
    try:
        verdict = await env.verify("no-such-session", Trajectory())
        problems.append(f"verify of an unknown session answered a verdict (reward {verdict.reward:g})")
    except (InfraError, UnknownSession) as exc:
        fine.append(f"unknown session: {exc.kind}")
    except PalaestraError as exc:
        problems.append(f"verify of an unknown session raised an untyped '{exc.kind}': {exc}"[:300])
    for probe in probes:
        session = await env.open(probe.task)
        try:
            for name, arguments in probe.calls:
                await env.call_tool(session.session_id, name, arguments)
            verdict = await env.verify(session.session_id, Trajectory())
            problems.append(f"{probe.name}: answered a verdict (reward {verdict.reward:g}), not failed({probe.kind})")
        except InfraError as exc:
            if exc.failure == probe.kind:
                fine.append(f"{probe.name}: failed({exc.failure})")
            else:
                problems.append(f"{probe.name}: failed({exc.failure}), not failed({probe.kind}): {exc}"[:300])
        except PalaestraError as exc:
            problems.append(f"{probe.name}: untyped '{exc.kind}', not failed({probe.kind}): {exc}"[:300])
        finally:
            await env.close(session.session_id)
    return problems, fine


async def check_env(spec: str, placement: str = "inprocess", limit: int | None = None,
                    tasks: list[Task] | None = None, options: dict[str, Any] | None = None) -> CheckReport:
    """``tasks`` (e.g. from ``env check --input``) replace the bundled ones, so a new environment can be
    checked before it has a ``data/`` folder. ``options``: the environment's constructor options
    (``rollout.config.env_options``; ``env check --sandbox``)."""
    given = tasks is not None
    try:
        mounted = await mount_env(spec, placement, options)
    except Exception as exc:  # the table is always printed: a mount that fails is its first row
        report = CheckReport(str(spec), placement, len(tasks or []))
        report.add("environment mounts", False, _raised(exc))
        return report
    env = mounted.client
    report = CheckReport(mounted.name, placement, len(tasks or []))
    try:
        return await _checks(report, mounted, spec, env, tasks, given, limit)
    finally:
        await mounted.stop()


def _raised(exc: BaseException) -> str:
    return f"raised {type(exc).__name__}: {exc}"[:500]


async def _checks(report: CheckReport, mounted: Any, spec: Any, env: EnvClient, tasks: list[Task] | None,
                  given: bool, limit: int | None) -> CheckReport:
    """The checks in order. An exception inside one is that check's failed row, never an aborted table:
    the row names the check and the exception, and the table (with the rows before it) is returned."""
    stage = "info and tool schemas"
    try:
        info = await env.info()
        tasks = list(tasks) if tasks is not None else mounted.env_class().examples()
        if limit:
            tasks = tasks[:limit]
        report.tasks = len(tasks)
        tools = info.get("tools") or []
        bad_schema = [t for t in tools if t.get("type") != "function" or "name" not in t.get("function", {})
                      or t["function"].get("parameters", {}).get("type") != "object"]
        report.add("info and tool schemas", not bad_schema and bool(info.get("name")),
                   f"{len(tools)} tools" if not bad_schema else f"bad schemas: {bad_schema[:2]}")
        if given:
            report.add("tasks", len(tasks) > 0, f"{len(tasks)} tasks given" if tasks else "the task file has no rows")
        else:  # a new environment has none yet: say where they go rather than a bare "0 tasks"
            report.add("bundled tasks", len(tasks) > 0, f"{len(tasks)} tasks" if tasks else
                       "0 tasks: put example rows in data/*.jsonl next to the module, or pass a task file "
                       "with --input tasks.jsonl")
        if not tasks:
            return report

        stage = "oracle scores full reward"
        oracle = await _policy_rollouts(env, tasks, "oracle")
        bad = [r for r in oracle if r.outcome.status != "scored" or r.verdict is None
               or r.verdict.reward < 1.0 - 1e-9 or not r.verdict.is_pass()]
        report.add("oracle scores full reward", not bad, f"{len(tasks) - len(bad)}/{len(tasks)} full" + _failures(bad))

        stage = "null policy scores nothing"
        null = await _policy_rollouts(env, tasks, "null")
        bad = [r for r in null if r.outcome.status != "scored" or r.verdict is None or r.verdict.reward > 0
               or r.verdict.is_pass()]
        report.add("null policy scores nothing", not bad, f"{len(tasks) - len(bad)}/{len(tasks)} zero" + _failures(bad))

        stage = "malformed tool calls get errors"
        problems = await _malformed_calls(env, tasks[0], tools)
        report.add("malformed tool calls get errors", not problems, "; ".join(problems) or "all answered with errors")

        stage = "grading failures come back typed"
        instance = spec if isinstance(spec, Environment) else mounted.env_class()
        make_probes = getattr(instance, "grading_probes", None)
        with tempfile.TemporaryDirectory(prefix="palaestra-probes-") as probe_dir:
            probes = list(make_probes(tasks[0], Path(probe_dir))) if make_probes is not None else []
            problems, fine = await _grading_failures(env, probes)
        report.add("grading failures come back typed", not problems, "; ".join(problems) or "; ".join(fine))

        stage = "verify is deterministic (and replayable)"
        mismatched = []
        for r in oracle[: min(5, len(oracle))]:
            if r.verdict is None:
                continue
            task = next(t for t in tasks if t.id == r.task_id)
            v1 = await env.verify_stateless(task, r.trajectory)
            v2 = await env.verify_stateless(task, r.trajectory)
            if v1.model_dump() != v2.model_dump() or v1.reward != r.verdict.reward:
                mismatched.append(f"{task.id}: live {r.verdict.reward} vs replay {v1.reward}/{v2.reward}")
        report.add("verify is deterministic (and replayable)", not mismatched, "; ".join(mismatched) or "stable")

        stage = "sessions freed"
        live = await _live_sessions(env)
        report.add("sessions freed", live in (0, None), f"{live} live sessions" if live else "all closed")
    except Exception as exc:
        report.add(stage, False, _raised(exc))
    return report


async def _live_sessions(env: EnvClient) -> int | None:
    return int((await env.health()).get("sessions", 0))  # every transport answers health
