"""One environment, every transport: the same verdicts and the same failure kinds for the same faults.

The environment (``faulty_env.py``) is reached five ways: its ASGI app in this process, a plain HTTP
server process, a supervised server process (``--placement local``), the host object itself
(``--placement direct``) and a Ray actor replica on a loopback-only Ray head. Every way must give the
answers written below; a transport that maps one fault differently (as the Ray client once turned an
unknown session into a plain error) fails here."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from palaestra.client.env_client import EnvClient
from palaestra.core.errors import PalaestraError
from palaestra.core.records import Task, ToolCallRecord, Trajectory
from palaestra.placement import mount_env
from palaestra.placement.process import _terminate, start_env_process
from palaestra.server.security import new_token

SPEC = f"{Path(__file__).with_name('faulty_env.py').resolve()}:FaultyEnv"
TRANSPORTS = ("asgi", "http", "supervised", "direct", "ray")
TASK = Task(id="t1", env="faulty", input="count to 3", metadata={"target": 3})

# What every transport must answer. Verdicts are the environment's own; each fault names the exception
# the client raised and its failure kind, or (for the model's own faults) the tool result's error kind.
EXPECTED: dict[str, Any] = {
    "tool_output": {"output": "counter is now 3"},
    "tool_error": "tool_error",
    "verdict": {"reward": 1.0, "passed": True, "components": {"state": 1.0, "answer": 1.0}, "answer": "3"},
    "verdict_wrong": {"reward": 0.0, "passed": False, "components": {"state": 0.0, "answer": 0.0}, "answer": None},
    "stateless": {"reward": 1.0, "passed": True, "components": {"state": 1.0, "answer": 1.0}, "answer": "3"},
    "reference": {"amount": 3},
    "unknown_session (tool)": ("EnvironmentFailure", "environment"),
    "unknown_session (verify)": ("EnvironmentFailure", "environment"),
    "session_limit": ("EnvironmentFailure", "environment"),
    "unknown_tool": "unknown_tool",
    "bad_arguments (wrong type)": "bad_arguments",
    "bad_arguments (not JSON)": "bad_arguments",
    "bad_arguments (not an object)": "bad_arguments",
    "invalid_task": ("InvalidTask", "invalid_task"),
    "verifier_exception": ("VerifierError", "verifier"),
}


def _verdict(v: Any) -> dict[str, Any]:
    d = v.model_dump(mode="json")
    return {k: d.get(k) for k in ("reward", "passed", "components", "answer")}


async def _raised(coro: Any) -> tuple[str, str]:
    try:
        await coro
    except PalaestraError as exc:
        return type(exc).__name__, getattr(exc, "failure", exc.kind)
    return ("no error", "")


async def observe(env: EnvClient) -> dict[str, Any]:
    """Drive the environment through the whole protocol and every fault; return what came back."""
    seen: dict[str, Any] = {}
    info = await env.info()
    assert info["name"] == "faulty" and any(t["function"]["name"] == "add" for t in info["tools"])
    s = await env.open(TASK)
    seen["tool_output"] = (await env.call_tool(s.session_id, "add", {"amount": 3})).to_dict()
    seen["tool_error"] = ((await env.call_tool(s.session_id, "add", '{"amount": 1000}')).error or {}).get("kind")
    seen["verdict"] = _verdict(await env.verify(s.session_id, Trajectory(final_answer="3")))
    fresh = await env.open(TASK)
    seen["verdict_wrong"] = _verdict(await env.verify(fresh.session_id, Trajectory()))
    replay = Trajectory(final_answer="3", tool_calls=[ToolCallRecord(name="add", arguments={"amount": 3})])
    seen["stateless"] = _verdict(await env.verify_stateless(TASK, replay))
    ref = await env.reference(TASK)
    seen["reference"] = ref.tool_calls[0].arguments if ref else None

    seen["unknown_session (tool)"] = await _raised(env.call_tool("no-such-session", "add", {"amount": 1}))
    seen["unknown_session (verify)"] = await _raised(env.verify("no-such-session", Trajectory()))
    seen["session_limit"] = await _raised(env.open(TASK))  # two are open: the cap of FaultyEnv
    for name, args in (("unknown_tool", {}), ("bad_arguments (wrong type)", {"amount": "many"}),
                       ("bad_arguments (not JSON)", '{"amount": 1'), ("bad_arguments (not an object)", "[1]")):
        tool = "no_such_tool" if name == "unknown_tool" else "add"
        seen[name] = ((await env.call_tool(s.session_id, tool, args)).error or {}).get("kind")
    await env.close(s.session_id)
    await env.close(fresh.session_id)

    seen["invalid_task"] = await _raised(env.open(Task(id="t2", env="faulty", input="?", metadata={})))
    boom = await env.open(Task(id="t3", env="faulty", input="?", metadata={"target": 1, "boom": True}))
    seen["verifier_exception"] = await _raised(env.verify(boom.session_id, Trajectory()))
    await env.close(boom.session_id)
    return seen


@pytest.fixture(scope="module")
def ray_head() -> Iterator[Any]:
    """A one-node Ray cluster on 127.0.0.1 (as tests/cluster starts it), joined by this process."""
    try:
        import ray
    except ImportError:
        pytest.skip("ray: the [ray] extra is not installed")
    from palaestra.cluster.localnode import auth_env, start_head
    from palaestra.cluster.runtime import connect
    from palaestra.cluster.spec import parse_cluster

    env = {**auth_env(), "RAY_DEDUP_LOGS": "0"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the driver (this process) needs the cluster's token
    tmp = Path(tempfile.mkdtemp(prefix="pal-ray-", dir="/tmp"))  # short: Ray's socket paths have a length cap
    head = start_head(tmp, cpus=2, env=env)
    try:
        conn = connect(parse_cluster(f"ray:{head.address}"))
        yield conn.ray
    finally:
        if ray.is_initialized():
            ray.shutdown()
        head.stop()
        left = head.leftovers()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        assert not left, f"Ray processes left running: {left}"


@contextlib.asynccontextmanager
async def reach(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[EnvClient]:
    """The environment, freshly started, behind one transport."""
    if kind in ("asgi", "supervised", "direct"):
        mounted = await mount_env(SPEC, {"asgi": "inprocess", "supervised": "local", "direct": "direct"}[kind])
        try:
            yield mounted.client
        finally:
            await mounted.stop()
    elif kind == "http":
        token = new_token()
        proc, port = await start_env_process(SPEC, token=token)
        client = EnvClient.http(f"http://127.0.0.1:{port}", name="faulty", token=token)
        try:
            yield client
        finally:
            await client.aclose()
            _terminate(proc)
    else:
        ray = request.getfixturevalue("ray_head")
        from palaestra.placement.ray import EnvReplica, RayTransport

        replica = ray.remote(EnvReplica).options(num_cpus=0, max_concurrency=64).remote(SPEC, {})
        await replica.ping.remote()
        client = EnvClient(RayTransport("faulty", [replica]), name="faulty")
        try:
            yield client
        finally:
            await client.aclose()
            await replica.close_all.remote()
            ray.kill(replica)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_same_answers_on_every_transport(kind: str, request: pytest.FixtureRequest) -> None:
    async with reach(kind, request) as env:
        seen = await observe(env)
    assert seen == EXPECTED, {k: (seen.get(k), v) for k, v in EXPECTED.items() if seen.get(k) != v}


async def test_a_dead_supervised_server_fails_as_environment_then_restarts() -> None:
    """The supervised transport's own fault: the process dies under a session. That call is
    failed(environment), like a lost Ray replica; the next session works on a fresh process."""
    mounted = await mount_env(SPEC, "local")
    try:
        assert mounted.supervisor is not None and mounted.supervisor.process is not None
        s = await mounted.client.open(TASK)
        first = mounted.supervisor.process
        first.kill()
        first.wait(30)
        assert await _raised(mounted.client.call_tool(s.session_id, "add", {"amount": 1})) == \
            ("EnvironmentFailure", "environment")
        assert mounted.supervisor.restarts == 1 and mounted.supervisor.process is not first
        s2 = await mounted.client.open(TASK)
        assert (await mounted.client.call_tool(s2.session_id, "add", {"amount": 3})).output == "counter is now 3"
    finally:
        await mounted.stop()
