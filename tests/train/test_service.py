"""The rollout service against a real policy endpoint: the scripted oracle served over HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from palaestra.core.records import Task
from palaestra.models.scripted import ScriptedBackend, reference_key
from palaestra.server.loopback import serve_app
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import ModelProxy
from palaestra.train.rollout_service import RolloutService
from palaestra.train.service_app import create_service_app
from palaestra.train.service_types import JobSpec

HERE = Path(__file__).parent
SPEC = f"{HERE / 'envs.py'}:Slowpoke"


def tasks(n: int, slow_members: tuple[int, ...] = (), slow_s: float = 0.0, prefix: str = "t") -> list[Task]:
    return [Task(id=f"{prefix}{i}", env=SPEC, input=f"Do task {prefix}{i}.",
                 metadata={"slow_members": list(slow_members), "slow_s": slow_s}) for i in range(n)]


@pytest.fixture(scope="module")
def policy_url() -> Iterator[str]:
    """The oracle knows every task these tests use (keyed by prompt, as a standalone server must)."""
    from palaestra.core.records import Reference, ToolCall

    ref = Reference(tool_calls=[ToolCall(name="work")], final_answer="done")
    prompts = [f"Do task {p}{i}." for p in ("t", "s", "w", "v", "h") for i in range(8)]
    refs = {reference_key([{"role": "user", "content": p}]): ref for p in prompts}
    with serve_app(create_model_app(ModelProxy(ScriptedBackend("oracle", references=refs)))) as url:
        yield url + "/v1"


@pytest.fixture
async def service() -> AsyncIterator[RolloutService]:
    svc = RolloutService()
    yield svc
    await svc.aclose()


def spec(url: str, task_list: list[Task], **kw: Any) -> JobSpec:
    return JobSpec.model_validate({"tasks": [t.model_dump() for t in task_list], "policy": {"base_url": url},
                                   "group_size": 3, **kw})


async def collect(job: Any) -> list[Any]:
    return [g async for g in job]


async def test_groups_arrive_complete_and_scored(service: RolloutService, policy_url: str) -> None:
    job = await service.submit(spec(policy_url, tasks(4), max_groups_in_flight=2))
    groups = await asyncio.wait_for(collect(job), 30)
    assert sorted(g.task_id for g in groups) == ["t0", "t1", "t2", "t3"]
    for g in groups:
        assert g.status == "complete" and g.padded == [] and g.rewards() == [1.0, 1.0, 1.0]
        assert [r.repeat for r in g.rollouts] == [0, 1, 2] and g.policy_version == 0
        assert all(r.trajectory.tool_calls[0].name == "work" for r in g.rollouts)
    assert job.done and job.stats()["counts"]["delivered"] == 4


@pytest.mark.parametrize("policy", ["drop", "pad", "wait"])
async def test_stragglers_past_the_deadline_by_policy(service: RolloutService, policy_url: str, policy: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="palaestra.train.service")
    prefix = {"drop": "s", "pad": "w", "wait": "v"}[policy]
    job = await service.submit(spec(policy_url, tasks(2, slow_members=(1,), slow_s=1.5, prefix=prefix),
                                    group_deadline_s=0.5, straggler_policy=policy))
    groups = await asyncio.wait_for(collect(job), 30)
    events = [e["event"] for e in job.events]
    if policy == "drop":
        assert groups == [] and events.count("partial_group_dropped") == 2
        assert "stragglers_cancelled" in caplog.text and "partial_group_dropped" in caplog.text
    elif policy == "pad":
        assert len(groups) == 2 and all(g.status == "padded" and g.padded == [1] for g in groups)
        for g in groups:
            stand_in = g.rollouts[1]
            assert stand_in.outcome.status == "timed_out" and stand_in.outcome.kind == "straggler"
            assert g.rewards() == [1.0, None, 1.0]
        assert events.count("group_padded") == 2
    else:
        assert len(groups) == 2 and all(g.status == "late" and g.rewards() == [1.0] * 3 for g in groups)
        assert all(g.wall_s >= 1.5 for g in groups) and events.count("stragglers_waited_for") == 2


async def test_staleness_bound_drops_and_resamples(service: RolloutService, policy_url: str) -> None:
    job = await service.submit(spec(policy_url, tasks(3, prefix="h"), max_staleness=0, max_groups_in_flight=1,
                                    max_buffered_groups=1))
    first = await asyncio.wait_for(job.next_group(), 10)
    assert first is not None and first.policy_version == 0
    deadline = time.monotonic() + 60  # the next group, sampled with version 0, waits in the buffer
    while not job._ready and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert job._ready and job._ready[0].policy_version == 0
    job.set_policy_version(1)
    rest = await asyncio.wait_for(collect(job), 30)
    assert sorted(g.task_id for g in rest) == ["h1", "h2"] and all(g.policy_version == 1 for g in rest)
    stale = [e for e in job.events if e["event"] == "stale_group_dropped"]
    assert len(stale) == 1 and stale[0]["requeued"] and stale[0]["group_version"] == 0


async def test_http_endpoint_round_trip(policy_url: str) -> None:
    svc = RolloutService()
    app = create_service_app(svc)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://service") as client:
        body = spec(policy_url, tasks(2, prefix="t"), sampling={"seed": 7}).model_dump(mode="json")
        made = await client.post("/jobs", json=body)
        assert made.status_code == 201, made.text
        job_id = made.json()["job_id"]
        got: list[dict[str, Any]] = []
        done = False
        while not done:
            page = (await client.get(f"/jobs/{job_id}/groups", params={"wait_s": 10, "rows": "rl"})).json()
            got += page["groups"]
            done = page["done"]
        assert len(got) == 2 and all(g["status"] == "complete" for g in got)
        # The scripted model returns no token ids: rows are empty and the stats say why.
        assert got[0]["rows"] == [] and "token_capture none" in next(iter(got[0]["row_stats"]["skipped"]))
        assert (await client.post(f"/jobs/{job_id}/policy_version", json={"version": 3})).json()["policy_version"] == 3
        status = (await client.get(f"/jobs/{job_id}")).json()
        assert status["counts"]["delivered"] == 2 and status["done"]
        assert (await client.delete(f"/jobs/{job_id}")).status_code == 200
        missing = await client.get(f"/jobs/{job_id}")
        assert missing.status_code == 404 and "POST /jobs" in missing.json()["error"]["hint"]
        bad = await client.post("/jobs", json={"tasks": [], "group_size": 0, "policy": {"base_url": policy_url}})
        assert bad.status_code == 400 and "group_size" in bad.json()["error"]["message"]
        no_env = await client.post("/jobs", json={**body, "tasks": [{"id": "x", "input": "hi"}]})
        assert no_env.status_code == 400 and "name no environment" in no_env.json()["error"]["message"]
    await svc.aclose()


def test_serve_rollouts_refuses_a_public_bind_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer
    from typer.testing import CliRunner

    from palaestra.cli import train_cmds

    monkeypatch.delenv("PALAESTRA_TOKEN", raising=False)
    root = typer.Typer()
    root.command("export")(train_cmds.export)
    root.add_typer(train_cmds.serve_app, name="serve")
    result = CliRunner().invoke(root, ["serve", "rollouts", "--host", "0.0.0.0", "--no-token"])
    assert result.exit_code == 2 and "only allowed on loopback" in result.output
