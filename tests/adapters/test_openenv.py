"""The OpenEnv adapter against the real ``openenv`` package: an environment written with OpenEnv's API,
served by OpenEnv's own ``create_app`` on 127.0.0.1 and reached through OpenEnv's WebSocket client, and
the same class run in-process. Both pass Palaestra's conformance suite."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="openenv: OpenEnv is not installed (pip install 'palaestra[openenv]')")

from palaestra.adapters.openenv_sessions import serve_openenv
from palaestra.core.errors import BadArguments, EnvironmentFailure, ToolError
from palaestra.core.records import Trajectory
from palaestra.envs.registry import load_env
from palaestra.rollout.conformance import check_env

FIXTURE = Path(__file__).resolve().parent / "openenv_counter.py"


@pytest.mark.parametrize("cls", ["RemoteCounter", "LocalCounter"])
async def test_openenv_environment_passes_env_check(cls: str, openenv_url: str) -> None:
    report = await check_env(f"{FIXTURE}:{cls}", "inprocess")
    failed = [f"{r.name}: {r.detail}" for r in report.results if not r.ok]
    assert not failed, failed
    assert report.tasks == 3 and len(report.results) == 8


async def test_episode_over_the_websocket_contract(openenv_url: str) -> None:
    env = load_env(f"{FIXTURE}:RemoteCounter")
    task = env.examples()[1]  # from 2 to -4
    [tool] = env.tool_schemas(task)
    params = tool["function"]["parameters"]
    assert tool["function"]["name"] == "step" and "delta" in params["properties"]
    assert "metadata" not in params["properties"] and params["additionalProperties"] is False

    state = await env.seed(task)
    try:
        prompt = env.prompt(task)  # the reset observation follows the task's prompt
        assert '"value": 2' in prompt[-1]["content"] and '"target": -4' in prompt[-1]["content"]
        with pytest.raises(BadArguments, match="delta"):
            await env.call_tool(state, "step", {"delta": 9})  # outside the Action's bounds: refused before sending
        out = await env.call_tool(state, "step", {"delta": -5})
        assert out == {"observation": {"value": -3, "target": -4}, "reward": 0.0, "done": False}
        assert env.verify(state, Trajectory()).reward == 0.0
        out = await env.call_tool(state, "step", {"delta": -1})
        assert out["done"] is True and out["reward"] == 1.0
        with pytest.raises(ToolError, match="episode is over"):
            await env.call_tool(state, "step", {"delta": 1})
        verdict = env.verify(state, Trajectory())
        assert verdict.reward == 1.0 and verdict.passed and verdict.metadata["steps"] == 2
    finally:
        await env.close(state)


async def test_not_done_is_not_passed_and_reward_modes(openenv_url: str) -> None:
    env = load_env(f"{FIXTURE}:LocalCounter")
    task = env.examples()[0]  # 0 -> 3
    state = await env.seed(task)
    try:
        for delta in (5, -2, -1):  # 5 (0.0), 3 (1.0, done) ... the third step is refused: episode over
            try:
                await env.call_tool(state, "step", {"delta": delta})
            except ToolError:
                pass
        assert state.rewards == [0.0, 1.0] and state.done
        for mode in ("final", "last", "sum", "max"):  # one terminal reward of 1: every mode agrees
            type(env).reward_mode = mode
            assert env.verify(state, Trajectory()).reward == 1.0
    finally:
        type(env).reward_mode = "final"
        await env.close(state)
    state = await env.seed(task)
    try:
        await env.call_tool(state, "step", {"delta": 2})
        verdict = env.verify(state, Trajectory())
        assert verdict.reward == 0.0 and not verdict.passed and verdict.components["done"] == 0.0
    finally:
        await env.close(state)


async def test_unreachable_server_is_an_environment_failure(openenv_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from palaestra.server.ports import free_port

    monkeypatch.setenv("PALAESTRA_TEST_OPENENV_URL", f"http://127.0.0.1:{free_port()}")
    env = load_env(f"{FIXTURE}:RemoteCounter")
    with pytest.raises(EnvironmentFailure, match="127.0.0.1") as info:
        await env.seed(env.examples()[0])
    assert info.value.failure == "environment" and info.value.hint


def test_serve_openenv_reports_a_server_that_cannot_start(adapters_dir: Path) -> None:
    with pytest.raises(EnvironmentFailure, match="no_such_module"), \
            serve_openenv("no_such_module:app", cwd=str(adapters_dir), startup_s=60):
        pass


def test_serve_openenv_starts_and_stops_a_server(adapters_dir: Path) -> None:
    import httpx

    with serve_openenv("health_app:app", cwd=str(adapters_dir)) as url:
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/health", timeout=5).json() == {"status": "healthy"}
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=2)
