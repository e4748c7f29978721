"""``palaestra view RUN_DIR``: the report's viewer served from 127.0.0.1, live while the run goes on.

The page is the static report's, in live mode: it asks a small JSON API for one page of rows at a time,
so a 100,000-rollout journal shows its first page as soon as the first fifty lines are read, while a
background thread indexes the rest and then follows the journal as the run appends to it. Blocking file
work runs in the thread pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from palaestra.metrics.rows import COLUMNS
from palaestra.report.detail import rollout_detail
from palaestra.report.index import JournalIndex
from palaestra.report.overview import build_overview
from palaestra.report.page import csp, render_page, viewer_script
from palaestra.report.rows import Filter
from palaestra.report.rundata import ReportError, RunInfo, load_run_info, run_metrics
from palaestra.server.security import LOOPBACK, Guard, GuardPolicy, choose_token
from palaestra.wire.errors import error_body

__all__ = ["LOOPBACK", "Viewer", "create_app", "serve", "viewer_policy"]

MAX_LIMIT = 500
FIRST_PAGE_WAIT_S = 1.5  # how long a request may index in line before answering with what it has


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse(error_body(kind, message), status_code=status)


class Viewer:
    """The state behind the app: the run, its journal index, a follower thread and a cached overview."""

    def __init__(self, info: RunInfo, *, poll_s: float = 1.0, overview_ttl_s: float = 5.0) -> None:
        self.info = info
        self.index = JournalIndex(info.journal)
        self.poll_s, self.overview_ttl_s = poll_s, overview_ttl_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._overview: tuple[int, float, dict[str, Any]] | None = None  # (version, made at, payload)
        self._overview_lock = threading.Lock()
        self._last_size, self._changed_at = -1, 0.0

    def start(self) -> None:
        """Start following the journal (idempotent; the first request starts it when lifespan did not)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.index.follow, args=(self._stop,),
                                            kwargs={"poll_s": self.poll_s}, name="palaestra-view-index",
                                            daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def status(self) -> dict[str, Any]:
        idx = self.index
        size = idx.path.stat().st_size if idx.path.exists() else 0
        now = time.monotonic()
        if size != self._last_size:  # the first look is a baseline, not a change
            if self._last_size >= 0:
                self._changed_at = now
            self._last_size = size
        return {"records": len(idx.rows), "size": size, "indexed_bytes": idx.pos, "complete": idx.complete,
                "version": idx.version, "growing": self._changed_at > 0 and now - self._changed_at < 10,
                "problems": len(idx.problems)}

    def facets(self) -> dict[str, Any]:
        rows = self.index.snapshot()
        kinds = sorted({r.kind for r in rows if r.status == "failed" and r.kind})
        return {"tasks": sorted({r.task_id for r in rows}), "kinds": kinds}

    def rows(self, flt: Filter, offset: int, limit: int) -> dict[str, Any]:
        if flt.empty:
            self.index.ensure(offset + limit, timeout_s=FIRST_PAGE_WAIT_S)
        else:  # a filter scans everything indexed: index as much as the wait allows first
            self.index.advance(deadline=time.monotonic() + FIRST_PAGE_WAIT_S)
        page, matched = self.index.query(flt, offset, limit)
        groups: dict[str, int] = {}
        return {"rows": [r.to_json(groups) for r in page], "groups": list(groups), "matched": matched,
                "total": len(self.index.rows), "complete": self.index.complete}

    def detail(self, seq: int) -> dict[str, Any]:
        if seq >= len(self.index.rows):
            self.index.ensure(seq + 1)
        return rollout_detail(self.index.read_record(seq), seq)

    def overview(self) -> dict[str, Any]:
        """The overview fragment, recomputed at most every ``overview_ttl_s`` while the journal changes."""
        with self._overview_lock:
            version, cached = self.index.version, self._overview
            fresh = cached is not None and (cached[0] == version or time.monotonic() - cached[1] < self.overview_ttl_s)
            if cached is not None and fresh:
                return cached[2]
            rows, partial = self.index.snapshot(), not self.index.complete
            metrics = run_metrics(self.info, rows, journal_problems=list(self.index.problems))
            payload = {"html": build_overview(rows, metrics, self.info.manifest, partial=partial),
                       "partial": partial, "version": version, "metrics": metrics}
            self._overview = (version, time.monotonic(), payload)
            return payload


def _filter_from(request: Request) -> tuple[Filter, int, int]:
    q = request.query_params

    def num(name: str) -> float | None:
        raw = q.get(name, "").strip()
        return float(raw) if raw else None

    offset, limit = int(q.get("offset", 0)), int(q.get("limit", 50))
    if offset < 0 or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"offset must be >= 0 and limit between 1 and {MAX_LIMIT}")
    flt = Filter(task=q.get("task") or None, outcome=q.get("outcome", "all"), min_reward=num("min_reward"),
                 max_reward=num("max_reward"), effective_only=q.get("effective") in ("1", "true"))
    return flt, offset, limit


def create_app(run_dir: str | Path, *, token: str | None = None, poll_s: float = 1.0) -> Starlette:
    """The viewer app for one run directory. With ``token``, every request must carry it (``?token=``
    once, which sets a cookie, or ``Authorization: Bearer``), whatever its Host: for embedding the app
    elsewhere. ``serve`` checks the token and the Host itself (``palaestra.server.security``)."""
    viewer = Viewer(load_run_info(run_dir), poll_s=poll_s)
    script = viewer_script()
    headers = {"Content-Security-Policy": csp([script], connect_self=True), "X-Content-Type-Options": "nosniff",
               "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}

    async def page(request: Request) -> Response:
        viewer.start()
        html = render_page(title=viewer.info.title, live=True,
                           overview_html='<p class="muted">Loading the overview…</p>',
                           data={"mode": "live", "columns": list(COLUMNS)})
        return HTMLResponse(html, headers=headers)

    def api(fn: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            viewer.start()
            try:
                result = await run_in_threadpool(fn, request)
            except ValueError as exc:
                return _error(400, "bad_request", str(exc))
            except IndexError as exc:
                return _error(404, "not_found", str(exc))
            return JSONResponse(result, headers={"Cache-Control": "no-store"})
        return endpoint

    def rows(request: Request) -> dict[str, Any]:
        flt, offset, limit = _filter_from(request)
        return viewer.rows(flt, offset, limit)

    def detail(request: Request) -> dict[str, Any]:
        return viewer.detail(int(request.path_params["seq"]))

    def overview(request: Request) -> dict[str, Any]:
        return {k: v for k, v in viewer.overview().items() if k != "metrics"}

    routes = [Route("/", page), Route("/api/status", api(lambda r: viewer.status())),
              Route("/api/facets", api(lambda r: viewer.facets())), Route("/api/rows", api(rows)),
              Route("/api/rollout/{seq:int}", api(detail)), Route("/api/overview", api(overview)),
              Route("/api/metrics", api(lambda r: viewer.overview()["metrics"]))]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        viewer.start()
        try:
            yield
        finally:
            await asyncio.to_thread(viewer.close)

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.viewer = viewer

    if token:
        app.add_middleware(Guard, policy=viewer_policy(None, token))
    return app


def viewer_policy(host: str | None, token: str | None, *, allowed_hosts: tuple[str, ...] = ()) -> GuardPolicy:
    """The viewer's checks: the names of a server bound to ``host`` (any name when None: an app embedded
    behind someone else's server) and its token, which ``?token=`` in the URL sets as a cookie named with
    the port (like Jupyter's), so the page's own requests carry it."""
    message = "this viewer needs its token: open the URL printed by `palaestra view` (it ends in ?token=...)"
    if host is None:
        return GuardPolicy(token=token, allowed_hosts=("*",), open_paths=(), cookie_prefix="palaestra_view",
                           unauthorized_message=message, unauthorized_hint="open the printed URL")
    return GuardPolicy.for_bind(host, token=token, allowed_hosts=allowed_hosts, open_paths=(),
                                cookie_prefix="palaestra_view", unauthorized_message=message,
                                unauthorized_hint="open the printed URL")


def serve(run_dir: str | Path, *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
          no_token: bool = False, allowed_hosts: tuple[str, ...] = (),
          on_ready: Callable[[str], None] | None = None) -> None:
    """Run the viewer until interrupted, behind the Host/Origin checks and a token: a fresh one in the URL
    ``on_ready`` gets (like Jupyter's) unless ``no_token`` (loopback only). A host beyond loopback needs a
    token given by the user (principle 10)."""
    from palaestra.core.errors import PalaestraError
    from palaestra.server.serving import run_guarded

    if host not in LOOPBACK and not token:
        raise ReportError(f"refusing to serve the viewer on {host} without a token",
                          hint="pass --token SECRET (or set PALAESTRA_VIEW_TOKEN), or keep --host 127.0.0.1")
    try:
        chosen = choose_token(host, given=token, no_token=no_token, default_on=True)
        policy = viewer_policy(host, chosen, allowed_hosts=allowed_hosts)
    except PalaestraError as exc:
        raise ReportError(exc.message, hint=exc.hint) from None
    app = create_app(run_dir)

    def ready(actual: int) -> None:
        shown = f"[{host}]" if ":" in host else host
        if on_ready:
            on_ready(f"http://{shown}:{actual}/" + (f"?token={chosen}" if chosen else ""))

    run_guarded(app, policy, host=host, port=port, on_ready=ready, access_log=False)  # no URL (token) in a log
