"""Palaestra environments served AS OpenEnv environment servers (``server/openenv_face.py``), driven by
OpenEnv's own client package on 127.0.0.1: its ``GenericEnvClient`` (plain dicts, as TRL's OpenEnv
recipes use it) and its ``MCPToolClient`` (tool listing and calls). The reference action scores 1 and a
wrong one 0, for a single-turn environment (``math``) and a multi-step tool environment (``workplace``);
failures of the server's side are error frames, never a reward of 0; Host and token are checked."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("openenv", reason="openenv: OpenEnv is not installed (pip install 'palaestra[openenv]')")

from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient

from palaestra import Environment, Task, Trajectory, Verdict, tool
from palaestra.envs.registry import load_env
from palaestra.server.loopback import serve_app
from palaestra.server.openenv_face import SUBMIT_TOOL, create_openenv_app
from palaestra.server.sessions import EnvironmentHost

TOKEN = "openenv-face-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class BrokenVerifier(Environment):
    """A tool environment whose verifier raises: the face must answer an error, not a reward of 0."""

    name = "broken-verifier"

    @tool
    def ping(self, state: Any) -> str:
        """Answer pong."""
        return "pong"

    def seed(self, task: Task) -> Any:
        if task.metadata.get("break_seed"):
            raise RuntimeError("the task's fixture files are missing")
        return task

    def verify(self, state: Any, trajectory: Trajectory) -> Verdict:
        raise RuntimeError("the grader's database is gone")


@pytest.fixture(scope="module")
def faces() -> Iterator[dict[str, str]]:
    """The OpenEnv face of three environments on 127.0.0.1, each behind a token."""
    envs = {"math": load_env("math"), "workplace": load_env("workplace"), "tool_call": load_env("tool_call"),
            "broken": BrokenVerifier()}
    tasks = {"broken": [Task(id="b-0", env="broken-verifier", input="Ping, then answer.")]}
    with serve_app(create_openenv_app(EnvironmentHost(envs["math"]), envs["math"].examples()),
                   token=TOKEN, lifespan="on") as math_url, \
            serve_app(create_openenv_app(EnvironmentHost(envs["workplace"]), envs["workplace"].examples()),
                      token=TOKEN, lifespan="on") as workplace_url, \
            serve_app(create_openenv_app(EnvironmentHost(envs["tool_call"]), envs["tool_call"].examples()),
                      token=TOKEN, lifespan="on") as tool_call_url, \
            serve_app(create_openenv_app(EnvironmentHost(envs["broken"]), tasks["broken"]),
                      token=TOKEN, lifespan="on") as broken_url:
        yield {"math": math_url, "workplace": workplace_url, "tool_call": tool_call_url, "broken": broken_url}


def _client(url: str) -> GenericEnvClient:
    return GenericEnvClient(base_url=url, headers=AUTH, message_timeout_s=60)


async def test_single_turn_env_reference_scores_1_and_wrong_answers_0(faces: dict[str, str]) -> None:
    env = load_env("math")
    tasks = env.examples()
    rewards, nulls, wrong = [], [], []
    async with _client(faces["math"]) as client:
        for task in tasks:
            reference = env.reference(task)
            assert reference is not None and reference.final_answer
            first = await client.reset(task_id=task.id)
            assert first.observation["task_id"] == task.id and not first.done
            assert first.observation["messages"] == env.prompt(task)  # what a trainer renders
            assert [t["name"] for t in first.observation["tools"]] == [SUBMIT_TOOL]
            result = await client.step({"answer": reference.final_answer})
            assert result.done and result.observation["verdict"]["passed"]
            rewards.append(result.reward)
            await client.reset(task_id=task.id)
            nulls.append((await client.step({"answer": ""})).reward)
            await client.reset(task_id=task.id)
            wrong.append((await client.step({"answer": r"\boxed{-987654321}"})).reward)
    assert rewards == [1.0] * len(tasks) and len(tasks) >= 20
    assert nulls == [0.0] * len(tasks) and wrong == [0.0] * len(tasks)


async def test_reset_picks_tasks_by_id_index_seed_and_row(faces: dict[str, str]) -> None:
    tasks = load_env("math").examples()
    async with _client(faces["math"]) as client:
        assert (await client.reset(index=2)).observation["task_id"] == tasks[2].id
        assert (await client.reset(seed=len(tasks) + 3)).observation["task_id"] == tasks[3].id
        row = {"id": "own-1", "input": "What is 2 + 3? Put the answer in \\boxed{}.",
               "metadata": {"expected_answer": "5"}}
        assert (await client.reset(task=row)).observation["task_id"] == "own-1"
        assert (await client.step({"answer": "\\boxed{5}"})).reward == 1.0
        state = await client.state()
        assert state["task_id"] == "own-1" and state["done"] and state["step_count"] == 1
        for bad, code in (({"colour": "red"}, "VALIDATION_ERROR"), ({"task_id": "nope"}, "VALIDATION_ERROR"),
                          ({"index": 10_000}, "VALIDATION_ERROR")):
            with pytest.raises(RuntimeError, match=code):
                await client.reset(**bad)
        with pytest.raises(RuntimeError, match="SESSION_ERROR"):  # the episode ended with its answer
            await client.step({"answer": "\\boxed{5}"})


async def test_tool_env_over_openenv_mcp_client(faces: dict[str, str]) -> None:
    """The multi-step tool environment through OpenEnv's MCP tool client: its tools are listed, the
    reference calls and answer score 1; a wrong action sequence scores 0."""
    env = load_env("workplace")
    tasks = env.examples()
    passed = 0
    async with MCPToolClient(base_url=faces["workplace"], headers=AUTH) as client:
        for task in tasks:
            reference = env.reference(task)
            assert reference is not None
            await client.reset(task_id=task.id)
            listed = await client.step(ListToolsAction())
            names = {t.name for t in listed.observation.tools}
            assert {"cancel_event", "list_events", SUBMIT_TOOL} <= names
            for call in reference.tool_calls:
                step = await client.step(CallToolAction(tool_name=call.name, arguments=call.arguments))
                assert step.observation.error is None and not step.done and step.reward == 0.0
            final = await client.step(CallToolAction(tool_name=SUBMIT_TOOL,
                                                     arguments={"answer": reference.final_answer or ""}))
            assert final.done
            passed += final.reward == 1.0
        assert passed == len(tasks)
        # wrong: answer without acting, and act on the wrong event
        await client.reset(task_id=tasks[0].id)
        assert (await client.step(CallToolAction(tool_name=SUBMIT_TOOL, arguments={"answer": "Done."}))).reward == 0.0
        await client.reset(task_id=tasks[0].id)
        listing = env.reference(tasks[0]).tool_calls[0]  # type: ignore[union-attr]  # list_events(date=...)
        events = await client.call_tool(listing.name, **listing.arguments)  # over HTTP /mcp: the tool's data
        others = [e for e in events if e["id"] != reference_event(env, tasks[0])]
        assert others, events
        await client.call_tool("cancel_event", event_id=others[0]["id"])
        final = await client.step(CallToolAction(tool_name=SUBMIT_TOOL, arguments={"answer": "I cancelled it."}))
        assert final.done and final.reward == 0.0


def reference_event(env: Any, task: Task) -> Any:
    ref = env.reference(task)
    return next(c.arguments["event_id"] for c in ref.tool_calls if c.name == "cancel_event")


async def test_model_mistakes_are_observations_and_infra_failures_are_errors(faces: dict[str, str]) -> None:
    async with _client(faces["workplace"]) as client:
        with pytest.raises(RuntimeError, match="SESSION_ERROR"):
            await client.step({"answer": "too early"})  # no reset yet
        await client.reset(index=0)
        unknown = await client.step({"type": "call_tool", "tool_name": "fly_to_moon", "arguments": {}})
        assert unknown.observation["error"]["error_type"] == "tool_not_found" and not unknown.done
        bad = await client.step({"type": "call_tool", "tool_name": "cancel_event", "arguments": {"event_id": "x"}})
        assert bad.observation["error"]["error_type"] == "invalid_args" and not bad.done
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            await client.step({"jump": True})
        assert (await client.state())["step_count"] == 2  # the two refused tool calls count as steps
    async with _client(faces["broken"]) as client:
        await client.reset()
        pong = await client.step({"type": "call_tool", "tool_name": "ping", "arguments": {}})
        assert pong.observation["result"]["data"] == "pong"
        with pytest.raises(RuntimeError, match=r"failed\(verifier\).*database is gone"):
            await client.step({"answer": "pong"})  # an error frame: no reward of 0 reaches the trainer
        with pytest.raises(RuntimeError, match=r"failed\(environment\).*fixture files are missing"):
            await client.reset(task={"id": "b-1", "input": "x", "metadata": {"break_seed": True}})
        assert (await client.state())["episode_id"] is None  # the socket lives on, with no episode
        with pytest.raises(RuntimeError, match="row of 'math'.*VALIDATION_ERROR"):
            await client.reset(task={"id": "m", "env": "math", "input": "1 + 1?"})


def _ws_handshake_status(port: int, host: str, token: str | None) -> int:
    lines = ["GET /ws HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
             *([f"Authorization: Bearer {token}"] if token else []), "", ""]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall("\r\n".join(lines).encode())
        return int(sock.recv(64).decode("latin-1").split()[1])


def test_host_and_token_are_checked(faces: dict[str, str]) -> None:
    url = faces["math"]
    port = int(url.rsplit(":", 1)[1])
    assert _ws_handshake_status(port, f"127.0.0.1:{port}", TOKEN) == 101
    assert _ws_handshake_status(port, f"evil.example.com:{port}", TOKEN) != 101  # DNS rebinding
    assert _ws_handshake_status(port, f"127.0.0.1:{port}", None) != 101
    with httpx.Client(base_url=url, timeout=30) as c:
        assert c.get("/schema", headers=AUTH).json()["action"]["properties"]["type"]["enum"]
        r = c.get("/schema", headers={**AUTH, "host": "evil.example.com"})
        assert r.status_code == 400 and r.json()["error"]["kind"] == "bad_host"
        assert c.get("/schema").status_code == 401
    client = GenericEnvClient(base_url=url, connect_timeout_s=10).sync()
    with pytest.raises(ConnectionError, match="403"):  # OpenEnv's client without the token: no episode
        client.reset()
    client.close()


def test_env_serve_openenv_cli_with_the_sync_client(tmp_path: Any) -> None:
    """``palaestra env serve math --openenv`` as a user starts it, driven by OpenEnv's sync client."""
    env = {**{k: v for k, v in os.environ.items() if k != "PALAESTRA_TOKEN"}, "PALAESTRA_TOKEN": TOKEN,
           "XDG_RUNTIME_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "palaestra.cli.main", "env", "serve", "math", "--openenv",
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 120)  # a bound on start-up, however slow
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("PALAESTRA_READY"), line
        url = f"http://127.0.0.1:{int(line.split()[1])}"
        assert httpx.get(f"{url}/health", timeout=30).json() == {"status": "healthy"}  # open, like /healthz
        math = load_env("math")
        task = math.examples()[5]
        reference = math.reference(task)
        assert reference is not None
        with GenericEnvClient(base_url=url, headers=AUTH).sync() as client:
            assert client.reset(task_id=task.id).observation["task_id"] == task.id
            assert client.step({"answer": reference.final_answer}).reward == 1.0
            client.reset(task_id=task.id)
            assert client.step({"answer": "no idea"}).reward == 0.0
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_production_mode_sessions_over_mcp(faces: dict[str, str]) -> None:
    """OpenEnv's production mode by hand: a session made on /mcp, its episode reset on /ws?session_id=,
    tools called on /mcp in that episode, the answer graded there, the session closed."""
    env = load_env("workplace")
    task = env.examples()[0]  # its tools take no argument called `name` (call_tool's own first parameter)
    reference = env.reference(task)
    assert reference is not None
    url = faces["workplace"]

    async def rpc(c: httpx.AsyncClient, method: str, **params: Any) -> dict[str, Any]:
        body = (await c.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 7, "method": method,
                                                  "params": params}, headers=AUTH)).json()
        assert body["id"] == 7
        return body

    async with httpx.AsyncClient(timeout=30) as c:
        sid = (await rpc(c, "openenv/session/create"))["result"]["session_id"]
        no_episode = await rpc(c, "tools/call", name="list_events", arguments={}, session_id=sid)
        assert "reset() on its /ws first" in no_episode["error"]["message"]
        async with GenericEnvClient(base_url=url, headers=AUTH) as plain:  # a plain client: its own session
            await plain.reset(task_id=task.id)
        from websockets.asyncio.client import connect

        async with connect(f"ws{url[4:]}/ws?session_id=nope", additional_headers=AUTH) as ws:
            frame = json.loads(await ws.recv())  # attaching to a session that does not exist
            assert frame["type"] == "error" and frame["data"]["code"] == "SESSION_ERROR"
        listed = await rpc(c, "tools/list")
        assert SUBMIT_TOOL in {t["name"] for t in listed["result"]["tools"]}
        assert "Unknown session_id" in (await rpc(c, "tools/list", session_id="nope"))["error"]["message"]
        client = MCPToolClient(base_url=url, headers=AUTH)
        async with client:  # MCPToolClient makes its own production session the same way
            await client.reset(task_id=task.id)
            for call in reference.tool_calls:
                await client.call_tool(call.name, **call.arguments)
            verdict = await client.call_tool(SUBMIT_TOOL, answer=reference.final_answer)
            assert verdict["reward"] == 1.0 and verdict["done"] and verdict["verdict"]["passed"]
            with pytest.raises(RuntimeError, match="SESSION_ERROR"):  # the episode is over
                await client.call_tool(SUBMIT_TOOL, answer="again")
        closed = await rpc(c, "openenv/session/close", session_id=sid)
        assert closed["result"] == {"session_id": sid, "closed": True}
        assert "error" in await rpc(c, "openenv/session/close", session_id=sid)
        assert (await rpc(c, "no/such/method"))["error"]["code"] == -32601


@pytest.fixture(scope="module")
def reimport(faces: dict[str, str], adapters_dir: Any) -> Iterator[None]:
    names = {"PALAESTRA_TEST_FACE_MATH_URL": faces["math"], "PALAESTRA_TEST_FACE_WORKPLACE_URL": faces["workplace"],
             "PALAESTRA_TEST_FACE_TOKEN": TOKEN}
    with pytest.MonkeyPatch.context() as mp:  # module-scoped: undone when the module's tests are done
        for k, v in names.items():
            mp.setenv(k, v)
        yield


@pytest.mark.parametrize("cls", ["ServedMath", "ServedWorkplace"])
async def test_served_env_reimported_through_the_openenv_adapter_passes_env_check(cls: str, reimport: None,
                                                                                adapters_dir: Any) -> None:
    from palaestra.rollout.conformance import check_env

    report = await check_env(f"{adapters_dir / 'openenv_face_envs.py'}:{cls}", "inprocess")
    table = {r.name: (r.ok, r.detail) for r in report.results}
    failed = {name: detail for name, (ok, detail) in table.items() if not ok}
    assert not failed, failed
    n = report.tasks
    assert n >= 20
    assert table["oracle scores full reward"][1].startswith(f"{n}/{n} full")
    assert table["null policy scores nothing"][1].startswith(f"{n}/{n} zero")


def _scripted_model(calls: list[Any], answer: str, submit: bool = False) -> Any:
    """A model_step for OpenEnv's white-box harness: one reference call per turn, then the answer (as a
    plain message, or through the submit_answer tool)."""
    from openenv.core.harness import ModelStepResult
    from openenv.core.llm_client import LLMResponse, ToolCall

    script = [[ToolCall(id=f"c{i}", name=c.name, args=dict(c.arguments))] for i, c in enumerate(calls)]
    if submit:
        script.append([ToolCall(id="s", name=SUBMIT_TOOL, args={"answer": answer})])

    def step(messages: list[dict[str, Any]], tools: list[Any], sampling: dict[str, Any]) -> Any:
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn < len(script):
            return ModelStepResult(response=LLMResponse(content="", tool_calls=script[turn]))
        return ModelStepResult(response=LLMResponse(content=answer))

    return step


def test_openenv_harness_rollouts_as_trl_drives_them(faces: dict[str, str]) -> None:
    """OpenEnv's own harness loop (``MCPHarnessAdapter``, what TRL's OpenEnv harness rollouts run) on
    sessions from ``PalaestraSessionFactory``: the reference policy's reward, resolved by OpenEnv's own
    rule, is 1 on every workplace task, whether it answers in a message or through ``submit_answer``, and
    on every tool_call task (its tools differ per task); a null policy's is 0; a broken verifier raises
    (unscorable), it is not a 0."""
    from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter, _resolve_env_reward

    from palaestra.adapters.openenv_harness import PalaestraSessionFactory

    env = load_env("workplace")
    factory = PalaestraSessionFactory(faces["workplace"], token=TOKEN)
    harness, limits = MCPHarnessAdapter(), HarnessRunLimits(max_turns=8)
    rewards: dict[str, list[float]] = {"message": [], "submit": [], "null": []}
    for i, task in enumerate(env.examples()):
        reference = env.reference(task)
        assert reference is not None
        for mode, model in (("message", _scripted_model(reference.tool_calls, reference.final_answer or "")),
                            ("submit", _scripted_model(reference.tool_calls, reference.final_answer or "", True)),
                            ("null", _scripted_model([], ""))):
            session = factory.create({"task_id": task.id}, seed=i, episode_id=f"{mode}-{i}")
            try:
                assert session.initial_messages() == env.prompt(task)
                assert {"cancel_event", SUBMIT_TOOL} <= {t.name for t in session.list_tools()}
                rollout = harness.run_white_box(model, session, limits)
                verdict = session.verify(rollout.messages)
                rewards[mode].append(_resolve_env_reward(rollout, verdict))
            finally:
                session.close()
        assert len(rollout.tool_trace) == 0  # the null policy made no call
    n = len(env.examples())
    assert rewards == {"message": [1.0] * n, "submit": [1.0] * n, "null": [0.0] * n}
    # per-task tools (tool_call: 19 tool sets over 22 tasks): each session lists its own task's tools
    tool_call = load_env("tool_call")
    per_task = PalaestraSessionFactory(faces["tool_call"], token=TOKEN)
    for task in tool_call.examples():
        reference = tool_call.reference(task)
        assert reference is not None
        session = per_task.create(task.id)
        try:
            listed = {t.name for t in session.list_tools()} - {SUBMIT_TOOL}
            assert listed == {t["function"]["name"] for t in tool_call.tool_schemas(task)}
            rollout = harness.run_white_box(_scripted_model(reference.tool_calls, reference.final_answer or ""),
                                            session, limits)
            assert _resolve_env_reward(rollout, session.verify(rollout.messages)) == 1.0, task.id
        finally:
            session.close()
    by_seed = factory.create([{"role": "user", "content": "?"}], seed=n + 2)  # no id: the seed picks the task
    by_id = factory.create(env.examples()[3].id)  # a dataset of task ids
    try:
        assert by_seed.initial_messages() == env.prompt(env.examples()[2])
        assert by_id.initial_messages() == env.prompt(env.examples()[3])
    finally:
        by_seed.close()
        by_id.close()
    broken = PalaestraSessionFactory(faces["broken"], token=TOKEN).create({"index": 0})
    try:
        rollout = harness.run_white_box(_scripted_model([], "pong"), broken, limits)
        with pytest.raises(RuntimeError, match=r"failed\(verifier\)"):
            broken.verify(rollout.messages)
    finally:
        broken.close()
