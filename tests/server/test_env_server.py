"""The environment server's HTTP surface, driven over real HTTP (in-process ASGI and a local process)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from palaestra.core.errors import ConfigError
from palaestra.core.records import Task, ToolCallRecord, Trajectory
from palaestra.envs.registry import load_env
from palaestra.placement import mount_env
from palaestra.server.env_app import create_env_app
from palaestra.server.sessions import EnvironmentHost

TASK = {"id": "t1", "env": "counter", "input": "go", "metadata": {"start": 1, "target": 4}}


@pytest.fixture
async def http(counter_spec: str):
    host = EnvironmentHost(load_env(counter_spec), ttl_s=3600, max_sessions=3)
    app = create_env_app(host)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://env") as client:
        client.host = host  # type: ignore[attr-defined]
        yield client


async def _open(http: httpx.AsyncClient) -> str:
    r = await http.post("/sessions", json={"task": TASK})
    assert r.status_code == 200, r.text
    return str(r.json()["session_id"])


async def test_session_tools_verify_and_delete(http: httpx.AsyncClient) -> None:
    r = await http.post("/sessions", json={"task": TASK})
    body = r.json()
    assert {t["function"]["name"] for t in body["tools"]} == {"add", "read", "explode"}
    assert body["messages"] == [{"role": "user", "content": "go"}]
    sid = body["session_id"]
    assert len(sid) >= 20  # unguessable
    r = await http.post(f"/sessions/{sid}/tools/add", json={"amount": 3})
    assert r.json() == {"output": "counter is now 4"}
    r = await http.post(f"/sessions/{sid}/tools/read", json={})
    assert r.json()["output"] == {"value": 4}
    r = await http.post(f"/sessions/{sid}/verify", json={"trajectory": {"final_answer": "4"}})
    assert r.json()["reward"] == 1.0 and r.json()["passed"] is True
    assert (await http.get("/healthz")).json()["sessions"] == 1
    assert (await http.delete(f"/sessions/{sid}")).json() == {"closed": True}
    assert (await http.get("/healthz")).json()["sessions"] == 0
    r = await http.post(f"/sessions/{sid}/tools/read", json={})
    assert r.status_code == 404 and r.json()["error"]["kind"] == "unknown_session"


@pytest.mark.parametrize(
    ("tool", "raw", "status", "kind"),
    [
        ("nope", b"{}", 404, "unknown_tool"),
        ("add", b"{amount: 3", 422, "bad_arguments"),
        ("add", b'{"amount": "three"}', 422, "bad_arguments"),
        ("add", b'{"amount": 1, "extra": 2}', 422, "bad_arguments"),
        ("add", b"{}", 422, "bad_arguments"),
        ("add", b"[1, 2]", 422, "bad_arguments"),
    ],
)
async def test_malformed_calls_are_structured_errors(http: httpx.AsyncClient, tool: str, raw: bytes, status: int,
                                                     kind: str) -> None:
    sid = await _open(http)
    r = await http.post(f"/sessions/{sid}/tools/{tool}", content=raw)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["kind"] == kind and err["message"]
    assert "Traceback" not in r.text


async def test_tool_errors_reach_the_model_not_a_500(http: httpx.AsyncClient) -> None:
    sid = await _open(http)
    r = await http.post(f"/sessions/{sid}/tools/add", json={"amount": 1000})
    assert r.status_code == 200
    assert r.json()["error"] == {"kind": "tool_error", "message": "amount 1000 is too large",
                                 "hint": "use at most 100 per call"}
    r = await http.post(f"/sessions/{sid}/tools/explode", json={"why": "x"})
    assert r.status_code == 200
    assert r.json()["error"]["kind"] == "tool_exception" and "boom x" in r.json()["error"]["message"]


async def test_bad_request_bodies(http: httpx.AsyncClient) -> None:
    r = await http.post("/sessions", content=b"not json")
    assert r.status_code == 400 and r.json()["error"]["kind"] == "bad_request"
    r = await http.post("/sessions", json={"nothing": 1})
    assert r.status_code == 400 and "task" in r.json()["error"]["message"]
    r = await http.post("/sessions", json={"task": {"input": "no id"}})
    assert r.status_code == 422 and "id" in r.json()["error"]["message"]
    r = await http.post("/sessions", json={"task": {"id": "x", "metadata": {}}})  # seed() raises KeyError
    assert r.status_code == 500 and r.json()["error"]["kind"] == "environment"


async def test_session_cap_and_ttl(http: httpx.AsyncClient) -> None:
    host: EnvironmentHost = http.host  # type: ignore[attr-defined]
    for _ in range(3):
        await _open(http)
    r = await http.post("/sessions", json={"task": TASK})
    assert r.status_code == 429 and r.json()["error"]["kind"] == "session_limit"
    host.ttl_s = 0.0
    await asyncio.sleep(0.01)
    r = await http.post("/sessions", json={"task": TASK})  # the cap triggers a reap of expired sessions
    assert r.status_code == 200
    assert len(host.sessions) == 1 and host.closed_total == 3


async def test_stateless_verify_replays_tool_calls(http: httpx.AsyncClient) -> None:
    traj = Trajectory(final_answer="4", tool_calls=[
        ToolCallRecord(name="add", arguments={"amount": 1}),
        ToolCallRecord(name="add", arguments={"amount": 5000}),  # failed in the original run too
        ToolCallRecord(name="add", arguments={"amount": 2}),
    ])
    r = await http.post("/verify", json={"task": TASK, "trajectory": traj.model_dump(mode="json")})
    assert r.json()["reward"] == 1.0
    r = await http.post("/verify", json={"task": TASK, "trajectory": {"final_answer": "4"}})
    assert r.json()["reward"] == 0.5
    assert (await http.get("/healthz")).json()["sessions"] == 0


async def test_info_lists_tools_and_verifier_hash(http: httpx.AsyncClient) -> None:
    info = (await http.get("/info")).json()
    assert info["name"] == "counter" and len(info["verifier_hash"]) == 16
    add = next(t for t in info["tools"] if t["function"]["name"] == "add")["function"]
    assert add["parameters"]["properties"]["amount"] == {
        "type": "integer", "description": "how much to add (may be negative, at most 100 in size)"}
    assert add["parameters"]["required"] == ["amount"]


@pytest.mark.parametrize("placement", ["inprocess", "direct", "local"])
async def test_placements_behave_alike(counter_spec: str, placement: str) -> None:
    mounted = await mount_env(counter_spec, placement)
    try:
        if placement == "local":
            assert mounted.startup_s < 60.0 and mounted.process is not None  # a bound against a hang, not a speed test
        env = mounted.client
        s = await env.open(Task.model_validate(TASK))
        assert (await env.call_tool(s.session_id, "add", {"amount": 3})).output == "counter is now 4"
        res = await env.call_tool(s.session_id, "add", "{not json")
        assert res.error is not None and res.error["kind"] == "bad_arguments"
        res = await env.call_tool(s.session_id, "missing", {})
        assert res.error is not None and res.error["kind"] == "unknown_tool"
        verdict = await env.verify(s.session_id, Trajectory(final_answer="4"))
        assert verdict.passed is True
        await env.close(s.session_id)
        from palaestra.core.errors import EnvironmentFailure

        with pytest.raises(EnvironmentFailure):
            await env.call_tool(s.session_id, "read", {})
    finally:
        await mounted.stop()
    if placement == "local":
        assert mounted.process is None


async def test_local_process_dies_with_its_parent_pipe(counter_spec: str) -> None:
    mounted = await mount_env(counter_spec, "local")
    proc = mounted.process
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()  # what happens when the runtime is SIGKILLed
    assert await asyncio.to_thread(proc.wait, 10) == 0
    await mounted.stop()  # stopping an exited server only releases its pipes


async def test_placement_errors_name_the_fix() -> None:
    with pytest.raises(ConfigError, match="needs a cluster") as ray:
        await mount_env("mcqa", "ray")
    assert "--cluster ray:local" in (ray.value.hint or "")
    with pytest.raises(ConfigError, match="unknown placement 'nearby'") as bogus:
        await mount_env("mcqa", "nearby")
    assert "direct" in (bogus.value.hint or "")
