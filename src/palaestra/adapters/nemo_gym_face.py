"""A Palaestra environment behind NeMo Gym's resources-server HTTP API, so NeMo Gym's own agents and
rollout collection (``gym eval run``, ``ng_collect_rollouts``) run against it like against any of theirs.

This is the reverse of ``nemo_gym_server`` (a NeMo Gym server driven as a Palaestra environment). The
routes are the ones NeMo Gym's simple agent calls on the resources server its config names:

- ``POST /seed_session`` with the task row: the row becomes a Palaestra task (a NeMo Gym row as
  ``eval run --input`` reads it, or the exact task under ``palaestra_task``, see ``nemo_gym_face_config``),
  a session is seeded on the environment and its id set as the ``palaestra_session`` cookie, which NeMo
  Gym's agent sends back with every later call of the rollout (that is how NeMo Gym keys session state);
- ``POST /<tool>`` with the arguments as the JSON body: the environment's tool on that session, answered
  with its output as JSON (an error inside the tool is an output the model reads, ``{"error": {...}}``);
- ``POST /verify`` with the row and the Responses ``response``: the rollout as a Palaestra trajectory,
  graded by the environment's own verifier; the answer is NeMo Gym's verify response (the body, plus
  ``reward``, ``resolved``, ``extracted_answer``, ``reward_components`` and the whole ``palaestra_verdict``).
  Without a session cookie (``gym eval reverify``) the rollout is graded statelessly: a fresh seed, the
  response's tool calls replayed, then the verifier;
- ``POST /close_session``, ``POST /aggregate_metrics``, ``GET /reverify_mode``, and any path under NeMo
  Gym's ``/ng-rollout/<id>`` prefix (what it sends with observability on) as the path without it.

Grading contract: a verifier or infrastructure failure is never a reward. NeMo Gym's collection aborts
the whole run on an error status from a resources server, so a failure is answered the way NeMo Gym's own
servers report one: a verify response with ``mask_sample: true`` (the sample is no measurement and is left
out of every score, ``/aggregate_metrics`` included), its ``failure_kind`` in NeMo Gym's vocabulary
(``verifier_error``, ``judge_failed``, ``session_lost``, else ``palaestra:<kind>``) and the message as
``failure_reason``; the reward field NeMo Gym's model requires is 0.0 there and means nothing. A failure
while seeding (a sandbox that did not start) is kept under the cookie and answered so at verify. A
malformed row or response is the caller's error: a 4xx envelope, as NeMo Gym's servers refuse one.
NeMo Gym's agents send no bearer token to resources servers, so this face has none: it binds loopback
only, and its Host and Origin are checked (``server.security``) like every Palaestra server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from palaestra.adapters.nemo_gym_rows import REASONING_MODE
from palaestra.core import ids
from palaestra.core.environment import Environment
from palaestra.core.errors import (
    EnvironmentFailure,
    InfraError,
    InvalidTask,
    PalaestraError,
    SessionLimit,
    UnknownSession,
)
from palaestra.core.records import Task, ToolCallRecord, Trajectory, Verdict
from palaestra.server.http import JSON, error_response, from_exception
from palaestra.server.sessions import EnvironmentHost
from palaestra.wire.errors import status_for, tool_arguments, unexpected
from palaestra.wire.responses import responses_to_chat
from palaestra.wire.translate import TranslationError

COOKIE = "palaestra_session"
TASK_KEY = "palaestra_task"  # a row's exact Palaestra task (rows written by ``nemo_gym_face_config.nemo_row``)
_PREFIX = re.compile(r"^/ng-rollout/[^/]+(/.*)$")  # NeMo Gym's per-rollout path prefix (observability on)
# Palaestra failure kinds in NeMo Gym's shared vocabulary (nemo_gym.failure_kinds); others are namespaced.
_FAILURE_KINDS = {"verifier": "verifier_error", "judge": "judge_failed", "unknown_session": "session_lost",
                  "timeout": "agent_timeout"}
_MAX_FAILED = 10_000  # seeding failures kept for their verify (oldest dropped first)


def task_from_row(row: Any, env_name: str) -> Task:
    """The Palaestra task of a NeMo Gym row sent to ``/seed_session`` or ``/verify``.

    A row written for this face carries the task itself; any other NeMo Gym row is read as ``eval run
    --input`` reads it, for the served environment (its ``agent_ref`` names NeMo Gym's agent, not a
    Palaestra environment, and NeMo Gym's bookkeeping fields ``_ng_*`` are no verifier input)."""
    from palaestra.rollout.tasks import parse_row  # adapters sit above rollout

    if not isinstance(row, dict):
        raise InvalidTask("the body must be a JSON object: a NeMo Gym task row")
    try:
        if isinstance(row.get(TASK_KEY), dict):
            task = Task.model_validate(row[TASK_KEY])
        else:
            clean = {k: v for k, v in row.items()
                     if k not in ("agent_ref", "response") and not k.startswith("_ng_")}
            task = parse_row(clean, str(row.get("_ng_task_index", "row")), env_name)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidTask(f"row field '{'.'.join(str(x) for x in first['loc'])}': {first['msg']}") from None
    except ValueError as exc:
        raise InvalidTask(f"row field {exc}") from None
    return task if task.env == env_name else task.model_copy(update={"env": env_name})


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


def trajectory_from_response(row: dict[str, Any], response: Any) -> Trajectory:
    """The rollout NeMo Gym's agent ran, as a Palaestra trajectory: the row's request input followed by
    the response's output items as chat messages, the function calls paired with their outputs by
    ``call_id``, and the last assistant message's text as the final answer.

    The row's input is translated as ``parse_row`` translates it for the task's prompt (reasoning items on
    their assistant turn), so the trajectory begins with exactly the environment's prompt: a verifier
    that tells the rollout's own calls from the row's history by that prefix (``tool_call``) finds it."""
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        raise InvalidTask("POST /verify: 'response' must be a Responses object with an 'output' list")
    raw_request = row.get("responses_create_params")
    request: dict[str, Any] = raw_request if isinstance(raw_request, dict) else {}
    asked = request.get("input") or []
    items = ([{"role": "user", "content": asked}] if isinstance(asked, str) else list(asked)) + response["output"]
    try:
        messages = responses_to_chat({"input": items, "instructions": request.get("instructions")},
                                     reasoning=REASONING_MODE)["messages"]
    except TranslationError as exc:
        raise InvalidTask(f"POST /verify: the response cannot be read as a conversation: {exc}") from None
    outputs = {it.get("call_id"): it.get("output") for it in response["output"]
               if isinstance(it, dict) and it.get("type") == "function_call_output"}
    calls = [ToolCallRecord(name=str(it.get("name", "")), arguments=_arguments(it.get("arguments")),
                            call_id=it.get("call_id"), output=_arguments(outputs.get(it.get("call_id"))))
             for it in response["output"] if isinstance(it, dict) and it.get("type") == "function_call"]
    final = None
    for it in reversed(response["output"]):
        if isinstance(it, dict) and it.get("type") == "message" and it.get("role", "assistant") == "assistant":
            content = it.get("content")
            final = content if isinstance(content, str) else "".join(
                str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
            break
    steps = sum(1 for m in messages if m.get("role") == "assistant")
    return Trajectory(messages=messages, tool_calls=calls, final_answer=final, steps=steps)


def verify_response(body: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    """NeMo Gym's verify response: what was verified, the reward, and Palaestra's verdict beside it."""
    out = dict(body)
    out.update(reward=float(verdict.reward), resolved=verdict.is_pass(), mask_sample=False,
               palaestra_verdict=verdict.model_dump(mode="json", exclude_none=True))
    if verdict.answer is not None:
        out.setdefault("extracted_answer", verdict.answer)
    if verdict.components:
        out["reward_components"] = {k: float(v) for k, v in verdict.components.items()}
    return out


def failure_response(body: dict[str, Any], exc: PalaestraError) -> dict[str, Any]:
    """A failed grading as NeMo Gym reports one: a masked sample with its kind and reason, no measurement."""
    kind = getattr(exc, "failure", None) or exc.kind
    return {**body, "reward": 0.0, "mask_sample": True, "resolved": False,
            "failure_kind": _FAILURE_KINDS.get(kind, f"palaestra:{kind}"), "failure_reason": exc.message[:2000],
            "palaestra_failure": exc.to_dict()}


def aggregate(verify_responses: list[Any]) -> dict[str, Any]:
    """``/aggregate_metrics``: mean reward per task (``_ng_task_index``) and over all measured rollouts;
    masked samples (failures) are counted apart, never averaged in."""
    by_task: dict[Any, list[float]] = {}
    masked = 0
    for r in verify_responses:
        if not isinstance(r, dict) or not isinstance(r.get("reward"), (int, float)):
            continue
        if r.get("mask_sample"):
            masked += 1
            continue
        by_task.setdefault(r.get("_ng_task_index"), []).append(float(r["reward"]))
    rewards = [x for xs in by_task.values() for x in xs]
    mean = sum(rewards) / len(rewards) if rewards else None
    groups = [{"_ng_task_index": k, "mean/reward": sum(v) / len(v), "num_rollouts": len(v)}
              for k, v in by_task.items()]
    agent = {"mean/reward": mean, "num_rollouts": len(rewards), "num_tasks": len(by_task), "num_masked": masked}
    return {"group_level_metrics": groups, "agent_metrics": agent, "key_metrics": {"mean/reward": mean}}


class NemoFace:
    """The sessions of one environment as NeMo Gym sees them: one per ``palaestra_session`` cookie."""

    def __init__(self, host: EnvironmentHost, *, limit_wait_s: float = 120.0) -> None:
        self.host = host
        self.limit_wait_s = limit_wait_s
        self.env_name = host.env.name
        self.seeded = 0
        self.verified = 0
        self.failed: dict[str, InfraError] = {}  # cookie -> why seeding failed (answered at verify)

    def _session(self, request: Request) -> str:
        sid = request.cookies.get(COOKIE)
        if not sid or sid not in self.host.sessions:
            raise UnknownSession(f"no live session for this request (cookie {COOKIE!r} "
                                 + ("missing)" if not sid else "names none)"),
                                 hint="POST /seed_session first and send back the cookie it sets")
        return sid

    async def seed(self, request: Request, body: Any) -> Response:
        row = body.get("task_data") if isinstance(body, dict) and isinstance(body.get("task_data"), dict) else body
        task = task_from_row(row, self.env_name)
        old = request.cookies.get(COOKIE)
        if old and old in self.host.sessions:  # a re-seed of the same client: its old state goes
            await self.host.close(old)
        self.seeded += 1
        try:
            sid = await self._open(task)
        except InfraError as exc:  # no state to run on: the rollout goes on, and its verify says why
            sid = ids.session_id()
            self.failed[sid] = exc
            while len(self.failed) > _MAX_FAILED:
                self.failed.pop(next(iter(self.failed)))
        answer: dict[str, Any] = {}
        if isinstance(body, dict) and isinstance(body.get("resources_session_id"), str):
            answer["resources_session_id"] = body["resources_session_id"]
        response = JSON(answer)
        response.set_cookie(COOKIE, sid, httponly=True, samesite="strict")
        return response

    async def _open(self, task: Task) -> str:
        """Seed a session. At the environment's session cap, wait for one to close (back-pressure, as
        Palaestra's own runner waits), up to ``limit_wait_s``; then it is failed(environment)."""
        deadline = time.monotonic() + self.limit_wait_s
        while True:
            try:
                return str((await self.host.open(task))["session_id"])
            except SessionLimit as exc:
                if time.monotonic() > deadline:
                    raise EnvironmentFailure(exc.message, hint=exc.hint, cause="session_limit") from exc
                await asyncio.sleep(0.05)

    async def tool(self, request: Request, name: str, raw: bytes) -> Response:
        failed = self.failed.get(request.cookies.get(COOKIE) or "")
        if failed is not None:
            return JSON({"error": {"kind": "environment", "message": f"the session failed to start: {failed.message}"}})
        sid = self._session(request)
        result = await self.host.call_tool(sid, name, tool_arguments(raw, name))
        return JSON(result.output if result.error is None else {"error": result.error})

    async def verify(self, request: Request, body: Any) -> Response:
        if not isinstance(body, dict):
            raise InvalidTask("POST /verify: the body must be a JSON object (the row and its 'response')")
        sid = request.cookies.get(COOKIE) or ""
        self.verified += 1
        if sid in self.failed:
            return JSON(failure_response(body, self.failed.pop(sid)))
        traj = trajectory_from_response(body, body.get("response"))
        try:
            if sid in self.host.sessions:
                try:
                    verdict = await self.host.verify(sid, traj)
                finally:
                    await self.host.close(sid)
            else:  # no session (a re-verification of a stored rollout): seed afresh, replay, verify
                verdict = await self.host.verify_stateless(task_from_row(body, self.env_name), traj)
        except InfraError as exc:
            return JSON(failure_response(body, exc))
        return JSON(verify_response(body, verdict))

    async def close(self, request: Request) -> Response:
        sid = request.cookies.get(COOKIE)
        closed = bool(sid) and await self.host.close(str(sid))
        return JSON({"closed": closed})


def create_nemo_face_app(env: Environment | EnvironmentHost, *, reap_interval_s: float = 60.0,
                         limit_wait_s: float = 120.0) -> Starlette:
    """The ASGI app of the face (serve it through ``server.security.secure``, as ``serve`` does)."""
    face = NemoFace(env if isinstance(env, EnvironmentHost) else EnvironmentHost(env), limit_wait_s=limit_wait_s)

    async def dispatch(request: Request) -> Response:
        path = request.url.path
        if (m := _PREFIX.match(path)) is not None:
            path = m.group(1)
        name = path.strip("/")
        try:
            if request.method == "GET":
                if name == "reverify_mode":
                    return JSON("stateless")
                if name in ("", "healthz"):
                    return JSON({"status": "ok", "env": face.env_name, "sessions": len(face.host.sessions),
                                 "seeded": face.seeded, "verified": face.verified, "api": "nemo-gym-resources"})
                return error_response("not_found", f"GET {path}: no such endpoint", 404,
                                      "a NeMo Gym resources server answers POST /seed_session, /<tool>, /verify")
            raw = await request.body()
            if name in ("seed_session", "verify", "close_session", "aggregate_metrics"):
                try:
                    body = orjson.loads(raw) if raw else {}
                except orjson.JSONDecodeError as exc:
                    raise PalaestraError(f"POST {path}: the body is not JSON ({exc})", kind="bad_request") from None
                if name == "seed_session":
                    return await face.seed(request, body)
                if name == "verify":
                    return await face.verify(request, body)
                if name == "close_session":
                    return await face.close(request)
                return JSON(aggregate(body.get("verify_responses") or [] if isinstance(body, dict) else []))
            return await face.tool(request, name, raw)
        except PalaestraError as exc:
            return from_exception(exc, status_for(exc))
        except Exception as exc:  # the last resort: a JSON error, never a stack trace
            detail, status = unexpected(exc)
            return JSON({"error": detail}, status_code=status)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def reaper() -> None:
            while True:
                await asyncio.sleep(reap_interval_s)
                await face.host.reap()

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            await face.host.close_all()

    app = Starlette(routes=[Route("/{path:path}", dispatch, methods=["GET", "POST"])], lifespan=lifespan)
    app.router.redirect_slashes = False
    app.state.face = face
    return app
