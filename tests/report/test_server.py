"""The live viewer's API, in process over ASGI: paging, filters, details, growth, errors and the token."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from palaestra.report.rundata import ReportError
from palaestra.report.server import create_app, serve

from .conftest import XSS, rollout, write_run


@pytest.fixture
async def client(mixed_run: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(mixed_run, poll_s=0.05)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://viewer") as c:
        yield c
    app.state.viewer.close()


async def test_page_and_security_headers(client: httpx.AsyncClient) -> None:
    r = await client.get("/")
    assert r.status_code == 200 and 'data-mode="live"' in r.text
    assert "connect-src 'self'" in r.headers["content-security-policy"]
    assert "default-src 'none'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"


async def test_rows_paging_and_filters(client: httpx.AsyncClient) -> None:
    page = (await client.get("/api/rows", params={"limit": 4})).json()
    assert page["total"] == 9 and page["matched"] == 9 and len(page["rows"]) == 4
    assert [r[0] for r in page["rows"]] == [0, 1, 2, 3]
    nxt = (await client.get("/api/rows", params={"offset": 8, "limit": 4})).json()
    assert [r[0] for r in nxt["rows"]] == [8]
    failed = (await client.get("/api/rows", params={"outcome": "failed"})).json()
    assert failed["matched"] == 2 and {r[7] for r in failed["rows"]} == {"environment", "sandbox"}
    rng = (await client.get("/api/rows", params={"min_reward": "0.2", "max_reward": "0.6"})).json()
    assert sorted(r[8] for r in rng["rows"]) == [0.25, 0.5]
    gamma = (await client.get("/api/rows", params={"task": "gamma", "effective": "1"})).json()
    assert gamma["matched"] == 2
    facets = (await client.get("/api/facets")).json()
    assert facets == {"tasks": ["alpha", "beta", "delta", "gamma"], "kinds": ["environment", "sandbox"]}


async def test_detail_and_errors(client: httpx.AsyncClient) -> None:
    d = (await client.get("/api/rollout/3")).json()
    assert d["task_id"] == "beta" and d["messages"][1]["content"] == XSS
    tokens = (await client.get("/api/rollout/0")).json()["tokens"]
    assert tokens["sequence"]["mask_spans"] == [[3, 5, 0], [7, 10, 1]]
    missing = await client.get("/api/rollout/99")
    assert missing.status_code == 404 and missing.json()["error"]["kind"] == "not_found"
    bad = await client.get("/api/rows", params={"outcome": "weird"})
    assert bad.status_code == 400 and "outcome filter" in bad.json()["error"]["message"]
    bad = await client.get("/api/rows", params={"limit": 100000})
    assert bad.status_code == 400


async def test_overview_and_metrics(client: httpx.AsyncClient) -> None:
    ov = (await client.get("/api/overview")).json()
    assert ov["partial"] is False and "pass@k and pass^k" in ov["html"] and "87.5%" in ov["html"]
    metrics = (await client.get("/api/metrics")).json()
    assert metrics["overall"]["n_failed"] == {"sandbox": 1}


async def status_when(c: httpx.AsyncClient, done: Callable[[dict[str, Any]], bool],
                      bound_s: float = 60.0) -> dict[str, Any]:
    """/api/status once ``done`` holds: the index follows the journal in a background thread, so what it
    has indexed at a given instant depends on the machine's load; the bound is only against a hang."""
    deadline = time.monotonic() + bound_s
    while True:
        status: dict[str, Any] = (await c.get("/api/status")).json()
        if done(status) or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.02)


async def test_follows_a_growing_journal(mixed_run: Path) -> None:
    app = create_app(mixed_run, poll_s=0.05)
    viewer = app.state.viewer
    viewer.overview_ttl_s = 0.0
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://v") as c:
        first = await status_when(c, lambda s: bool(s["complete"]))
        assert first["records"] == 9 and first["complete"] and first["growing"] is False
        with (mixed_run / "rollouts.jsonl").open("ab") as fh:
            fh.write(orjson.dumps(rollout("epsilon", 0, reward=0.0)) + b"\n")
        status = await status_when(c, lambda s: s["records"] == 10 and bool(s["complete"]))
        assert status["records"] == 10 and status["version"] > first["version"] and status["growing"] is True
        rows = (await c.get("/api/rows", params={"task": "epsilon"})).json()
        assert rows["matched"] == 1
        assert "epsilon" in (await c.get("/api/overview")).json()["html"]
    viewer.close()


async def test_token_gate(mixed_run: Path) -> None:
    app = create_app(mixed_run, token="s3cret")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://v") as c:
        denied = await c.get("/api/status")
        assert denied.status_code == 401 and "token" in denied.json()["error"]["message"]
        assert (await c.get("/api/status", headers={"Authorization": "Bearer s3cret"})).status_code == 200
        page = await c.get("/", params={"token": "s3cret"})
        assert page.status_code == 200 and "palaestra_view" in page.headers["set-cookie"]
        assert (await c.get("/api/status")).status_code == 200  # the cookie now carries the token
    app.state.viewer.close()


def test_serve_refuses_a_public_address_without_token(mixed_run: Path) -> None:
    with pytest.raises(ReportError, match="without a token"):
        serve(mixed_run, host="0.0.0.0")


def test_create_app_checks_the_run_directory(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="not a run directory"):
        create_app(tmp_path)
    assert write_run(tmp_path / "ok", [rollout("a")]).is_dir()
