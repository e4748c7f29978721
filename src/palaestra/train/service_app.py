"""``palaestra serve rollouts``: the rollout service over HTTP (JSON, Starlette).

    POST   /jobs                          JobSpec -> {"job_id", ...stats}
    GET    /jobs/{id}/groups?max=&wait_s=&rows=rl&normalisation=
                                          finished groups (long-poll: waits up to wait_s for the first)
    POST   /jobs/{id}/policy_version      {"version": int}: the trainer's weights moved on
    POST   /jobs/{id}/tasks               {"tasks": [...]}: more tasks for a running job
    GET    /jobs/{id}                     progress, counters and the event log (drops, pads, stale groups)
    DELETE /jobs/{id}                     cancel and forget
    GET    /healthz

With ``rows=rl`` each group also carries its ``rl`` export rows (token ids, masks, logprobs, GRPO
advantages), so a trainer needs no Palaestra code to consume it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from palaestra.core.errors import PalaestraError
from palaestra.core.records import Task
from palaestra.train.advantages import NORMALISATIONS
from palaestra.train.rollout_service import RolloutService
from palaestra.train.rows import rl_rows
from palaestra.train.service_types import Group, JobSpec
from palaestra.wire.errors import error_body

log = logging.getLogger("palaestra.train.service")
MAX_WAIT_S = 300.0


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _error(kind: str, message: str, status: int, hint: str | None = None) -> Response:
    return _json(error_body(kind, message, hint), status)


async def _body(request: Request) -> Any:
    try:
        return orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise PalaestraError(f"request body is not valid JSON ({exc})", kind="bad_request",
                             hint="send a JSON object with Content-Type: application/json") from None


def _group_json(group: Group, rows: str | None, normalisation: str) -> dict[str, Any]:
    out = group.model_dump(mode="json")
    if rows == "rl":
        out["rows"], stats = rl_rows(group.rollouts, normalisation=normalisation)  # type: ignore[arg-type]
        out["row_stats"] = stats.to_dict()
    return out


def create_service_app(service: RolloutService) -> Starlette:
    Handler = Callable[[Request], Awaitable[Response]]

    def guarded(fn: Handler) -> Handler:
        async def handle(request: Request) -> Response:
            try:
                return await fn(request)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors()[:10])
                return _error("bad_request", f"invalid request: {problems}", 400)
            except PalaestraError as exc:
                status = 404 if exc.kind == "unknown_job" else 400
                return _error(exc.kind, exc.message, status, exc.hint)
            except Exception as exc:  # a bug: a clean answer for the client, the traceback in the log
                log.exception("rollout service failed on %s", request.url.path)
                return _error("internal", f"{type(exc).__name__}: {exc}", 500)
        return handle

    async def submit(request: Request) -> Response:
        job = await service.submit(JobSpec.model_validate(await _body(request)))
        return _json(job.stats(), 201)

    async def groups(request: Request) -> Response:
        job = service.job(request.path_params["job_id"])
        q = request.query_params
        try:
            limit = max(1, int(q.get("max", "16")))
            wait_s = min(max(0.0, float(q.get("wait_s", "30"))), MAX_WAIT_S)
        except ValueError:
            return _error("bad_request", "max must be an integer and wait_s a number", 400)
        rows, norm = q.get("rows"), q.get("normalisation", "group")
        if rows not in (None, "rl") or norm not in NORMALISATIONS:
            return _error("bad_request", f"rows must be 'rl' (or absent), normalisation one of {NORMALISATIONS}", 400)
        out = []
        first = await job.next_group(timeout=wait_s)
        if first is not None:
            out.append(first)
            while len(out) < limit and (more := await job.next_group(timeout=0)) is not None:
                out.append(more)
        return _json({"groups": [_group_json(g, rows, norm) for g in out], "done": job.done,
                      "policy_version": job.version})

    async def version(request: Request) -> Response:
        job = service.job(request.path_params["job_id"])
        body = await _body(request)
        value = body.get("version") if isinstance(body, dict) else None
        if not isinstance(value, int) or isinstance(value, bool):
            return _error("bad_request", 'send {"version": <int>}', 400)
        job.set_policy_version(value)
        return _json(job.stats())

    async def tasks(request: Request) -> Response:
        job = service.job(request.path_params["job_id"])
        body = await _body(request)
        rows = body.get("tasks") if isinstance(body, dict) else None
        if not isinstance(rows, list) or not rows:
            return _error("bad_request", 'send {"tasks": [Task, ...]}', 400)
        job.add_tasks([Task.model_validate(t) for t in rows])
        return _json(job.stats())

    async def status(request: Request) -> Response:
        return _json(service.job(request.path_params["job_id"]).stats())

    async def cancel(request: Request) -> Response:
        await service.forget(request.path_params["job_id"])
        return _json({"cancelled": request.path_params["job_id"]})

    async def healthz(request: Request) -> Response:
        return _json({"status": "ok", "jobs": len(service.jobs)})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await service.aclose()

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/jobs", guarded(submit), methods=["POST"]),
        Route("/jobs/{job_id}", guarded(status), methods=["GET"]),
        Route("/jobs/{job_id}", guarded(cancel), methods=["DELETE"]),
        Route("/jobs/{job_id}/groups", guarded(groups), methods=["GET"]),
        Route("/jobs/{job_id}/policy_version", guarded(version), methods=["POST"]),
        Route("/jobs/{job_id}/tasks", guarded(tasks), methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
