"""One rollout, start to finish: open a session, let the agent act through the model proxy, verify,
close. Every failure is caught here, typed and returned as data — a bad rollout never crashes a run,
and an infrastructure failure is never scored."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from palaestra.adapters import nemo_gym_rows as nemo_rows
from palaestra.agents.base import Agent, BackendChat, ToolSurface
from palaestra.client.env_client import EnvClient
from palaestra.core import ids
from palaestra.core.deadline import time_limit
from palaestra.core.errors import EnvironmentFailure, InfraError, PalaestraError
from palaestra.core.records import ModelCallRecord, Outcome, Rollout, Task, Trajectory, Usage, Verdict
from palaestra.models.base import CallContext
from palaestra.wire.env import SessionHandle


class Proxy(Protocol):
    def register(self, rollout_id: str, ctx: CallContext) -> None: ...
    async def complete(self, rollout_id: str | None, api: Any, body: dict[str, Any]) -> dict[str, Any]: ...
    def release(self, rollout_id: str) -> list[ModelCallRecord]: ...


def new_rollout_id() -> str:
    return ids.rollout_id()


async def open_session(env: EnvClient, task: Task, *, first_wait_s: float = 0.01, max_wait_s: float = 0.5
                       ) -> SessionHandle:
    """Open a session, waiting while the environment has none free (``session_limit``): a full store is
    back-pressure, never a failed rollout. The collector's gate keeps its own rollouts within a cap it
    knows; this covers a store it shares (a server other clients use, Ray replicas), polled with a
    capped exponential backoff. The rollout's deadline bounds the wait."""
    wait = first_wait_s
    while True:
        try:
            return await env.open(task)
        except EnvironmentFailure as exc:
            if exc.cause != "session_limit":
                raise
        await asyncio.sleep(wait)
        wait = min(2 * wait, max_wait_s)


async def run_rollout(
    task: Task,
    *,
    env: EnvClient,
    agent: Agent,
    proxy: Proxy,
    model_name: str,
    repeat: int = 0,
    attempt: int = 0,
    deadline_s: float = 600.0,
    sampling: dict[str, Any] | None = None,
    with_reference: bool = False,
    rollout_id: str | None = None,
) -> Rollout:
    """Run one (task, repeat, attempt). Never raises for a rollout-level failure."""
    rid = rollout_id or new_rollout_id()
    started = time.time()
    timings: dict[str, float] = {}
    traj: Trajectory | None = None  # the agent's, once it returned one
    verdict: Verdict | None = None
    outcome = Outcome.scored()
    session_id: str | None = None
    phase = "seed"

    try:
        with time_limit(deadline_s):  # one deadline over model, tools and verify
            t0 = time.perf_counter()
            ref = await env.reference(task) if with_reference else None
            proxy.register(rid, CallContext(rollout_id=rid, task=task, reference=ref))
            session = await open_session(env, task)
            session_id = session.session_id
            timings["seed_s"] = time.perf_counter() - t0

            phase = "agent"
            t0 = time.perf_counter()
            surface = ToolSurface(env, session)
            # a NeMo Gym row's own request settings (tool_choice, sampling, ...), under the run's flags
            run_sampling = dict(sampling or {})
            tool_choice = run_sampling.pop("tool_choice", None)  # only for requests with tools: BackendChat adds it
            call_settings = {**nemo_rows.task_settings(task), **run_sampling}
            traj = await agent.run(task, session, surface, BackendChat(proxy, rid, tool_choice=tool_choice),
                                   call_settings)
            timings["agent_s"] = time.perf_counter() - t0

            phase = "verify"
            t0 = time.perf_counter()
            verdict = await env.verify(session_id, traj)
            timings["verify_s"] = time.perf_counter() - t0
    except asyncio.TimeoutError:
        outcome = Outcome(status="timed_out", kind="timeout",
                          message=f"rollout deadline of {deadline_s:g} s passed during {phase}")
    except InfraError as exc:
        outcome = Outcome.failed(exc.failure, str(exc))
    except PalaestraError as exc:
        kind = "environment" if phase in ("seed", "verify") else "agent"
        outcome = Outcome.failed(kind, f"{exc.kind}: {exc}")
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a harness bug is the agent's failure, an unreadable verdict the verifier's: not a zero
        kind = {"agent": "agent", "verify": "verifier"}.get(phase, "environment")
        outcome = Outcome.failed(kind, f"{type(exc).__name__}: {exc}")
    finally:
        if session_id is not None:
            t0 = time.perf_counter()
            try:
                with time_limit(10.0):
                    await env.close(session_id)
            except Exception:  # the session TTL frees it eventually; the verdict stands
                pass
            timings["close_s"] = time.perf_counter() - t0
        calls = proxy.release(rid)
    if traj is None:
        traj = Trajectory(model_calls=calls)
    else:
        traj.model_calls = calls
    if outcome.status != "scored":
        verdict = None
    usage = Usage.total([call.usage for call in calls], tool_calls=len(traj.tool_calls))
    timings["total_s"] = time.time() - started
    return Rollout(
        rollout_id=rid, task_id=task.id, env=task.env, agent=agent.name, model=model_name, repeat=repeat,
        attempt=attempt, outcome=outcome, verdict=verdict, trajectory=traj, usage=usage, timings=timings,
        started_at=started, tags=list(task.tags),
    )
