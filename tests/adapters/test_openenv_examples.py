"""OpenEnv environments with the contracts of OpenEnv's own examples (tests/adapters/openenv_examples.py),
in-process and over OpenEnv's own server on 127.0.0.1: the grid world scores oracle 1 and null 0 (its
``reset(self)`` takes no seed, its per-step rewards are shaped), and the MCP echo environment exposes
its MCP tools and passes ``env check``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="openenv: OpenEnv is not installed (pip install 'palaestra[openenv]')")

from palaestra.adapters.openenv import OpenEnvEnvironment
from palaestra.core.errors import BadArguments, UnknownTool
from palaestra.core.records import Task, Trajectory
from palaestra.envs.registry import load_env
from palaestra.rollout.conformance import check_env
from palaestra.server.loopback import serve_app

FIXTURE = Path(__file__).resolve().parent / "openenv_examples.py"


@pytest.fixture(scope="module")
def example_servers(adapters_dir: Path) -> Iterator[dict[str, str]]:
    """Both example apps (OpenEnv's create_app) on 127.0.0.1, their URLs where the remote adapters look."""
    from openenv_examples import echo_app, grid_app

    with serve_app(grid_app, start_timeout_s=30, lifespan="auto") as grid_url, \
            serve_app(echo_app, start_timeout_s=30, lifespan="auto") as echo_url, \
            pytest.MonkeyPatch.context() as mp:  # module-scoped: undone when the module's tests are done
        urls = {"PALAESTRA_TEST_OPENENV_GRID_URL": grid_url, "PALAESTRA_TEST_OPENENV_ECHO_URL": echo_url}
        for k, v in urls.items():
            mp.setenv(k, v)
        yield urls


def _table(report: object) -> dict[str, tuple[bool, str]]:
    return {r.name: (r.ok, r.detail) for r in report.results}  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", ["LocalGrid", "RemoteGrid", "LocalEcho", "RemoteEcho"])
async def test_examples_pass_env_check(cls: str, example_servers: dict[str, str]) -> None:
    report = await check_env(f"{FIXTURE}:{cls}", "inprocess")
    table = _table(report)
    failed = {name: detail for name, (ok, detail) in table.items() if not ok}
    assert not failed, failed
    assert table["oracle scores full reward"][1].startswith("3/3 full")
    assert table["null policy scores nothing"][1].startswith("3/3 zero")
    assert len(report.results) == 8


@pytest.mark.parametrize("cls", ["LocalGrid", "RemoteGrid"])
async def test_grid_world_final_reward_not_the_shaped_sum(cls: str, example_servers: dict[str, str]) -> None:
    env = load_env(f"{FIXTURE}:{cls}")
    task = env.examples()[0]
    reference = env.reference(task)
    assert reference is not None
    state = await env.seed(task)  # reset() declares no seed/episode_id: none is passed
    try:
        for call in reference.tool_calls:
            await env.call_tool(state, call.name, call.arguments)
        verdict = env.verify(state, Trajectory())
        assert state.rewards[:7] == [-0.1] * 7 and state.rewards[-1] == 1.0 and state.done
        assert verdict.reward == 1.0 and verdict.passed  # final: the terminal reward
        assert verdict.components["return"] == pytest.approx(0.3)  # the return stays visible
        assert env.score(state.rewards, "sum") == pytest.approx(0.3)
        assert env.score(state.rewards, "max") == 1.0
    finally:
        await env.close(state)
    state = await env.seed(task)  # a walk that never reaches the goal scores 0, not its last -0.1
    try:
        await env.call_tool(state, "step", {"action": "DOWN"})
        verdict = env.verify(state, Trajectory())
        assert verdict.reward == 0.0 and not verdict.passed and state.rewards == [-0.1]
    finally:
        await env.close(state)


async def test_a_rows_reward_mode_is_honoured_and_checked(example_servers: dict[str, str]) -> None:
    from palaestra.core.errors import ConfigError

    env = load_env(f"{FIXTURE}:LocalGrid")
    task = env.examples()[0].model_copy(update={"metadata": {**env.examples()[0].metadata, "reward_mode": "sum"}})
    state = await env.seed(task)
    try:
        for call in env.reference(task).tool_calls:  # type: ignore[union-attr]
            await env.call_tool(state, call.name, call.arguments)
        assert env.verify(state, Trajectory()).reward == pytest.approx(0.3)
    finally:
        await env.close(state)
    bad = task.model_copy(update={"metadata": {"reward_mode": "median"}})
    with pytest.raises(ConfigError, match="median"):
        env.check_task(bad)


@pytest.mark.parametrize("cls", ["LocalEcho", "RemoteEcho"])
async def test_mcp_tools_are_palaestra_tools(cls: str, example_servers: dict[str, str]) -> None:
    env = load_env(f"{FIXTURE}:{cls}")
    tools = {t["function"]["name"]: t["function"] for t in env.tool_schemas()}
    assert set(tools) == {"echo_message", "echo_with_length"}
    assert tools["echo_message"]["parameters"]["properties"] == {"message": {"type": "string"}}
    assert "Return the message" in tools["echo_with_length"]["description"]
    task = env.examples()[0]
    state = await env.seed(task)
    try:
        assert await env.call_tool(state, "echo_message", {"message": "hi"}) == "hi"
        assert await env.call_tool(state, "echo_with_length", {"message": "abc"}) == {"message": "abc", "length": 3}
        with pytest.raises(UnknownTool):
            await env.call_tool(state, "step", {"type": "call_tool", "tool_name": "echo_message", "arguments": {}})
        with pytest.raises(BadArguments):
            await env.call_tool(state, "echo_message", {"message": 3})
        assert len(state.outcomes) == 2  # refused calls never reached the environment
        assert env.verify(state, Trajectory()).reward == 0.0  # the last echo was 'abc', not 'hello'
    finally:
        await env.close(state)


async def test_env_check_keeps_its_table_when_a_check_raises(example_servers: dict[str, str]) -> None:
    """A check that raises is a failed row naming the exception; the rows before it stay."""
    report = await check_env(f"{FIXTURE}:ProbeRaises", "inprocess")
    table = _table(report)
    assert table["oracle scores full reward"][0] and table["null policy scores nothing"][0]
    ok, detail = table["grading failures come back typed"]
    assert not ok and "RuntimeError" in detail and "probe factory broke" in detail
    report = await check_env(f"{FIXTURE}:NoSuchClass", "inprocess")
    [row] = report.results
    assert row.name == "environment mounts" and not row.ok and "NoSuchClass" in row.detail


# ---- OpenEnv's own shipped example: the environment `openenv init` writes ------------------------------
class TemplateEcho(OpenEnvEnvironment):
    """``openenv init demo_env``'s environment: echoes a message, reward min(0.1 x length, 1), never done;
    its ``step(self, action)`` declares no ``timeout_s``. The task: send a message of 10+ characters."""

    name = "openenv-template"
    openenv_env = "demo_env.server.demo_env_environment:DemoEnvironment"
    openenv_action = "demo_env.models:DemoAction"
    reward_mode = "max"
    require_done = False

    def examples(self) -> list[Task]:
        return [Task(id=f"{self.name}-{i}", env=self.name, input="Send a message of at least 10 characters.",
                     metadata={"reference_actions": [{"message": text}]})
                for i, text in enumerate(["0123456789", "a longer message than that"])]


@pytest.fixture(scope="module")
def openenv_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The template environment, written by OpenEnv's own CLI (offline) into a temporary directory."""
    import subprocess
    import sys

    where = tmp_path_factory.mktemp("openenv-init")
    subprocess.run([sys.executable, "-m", "openenv.cli", "init", "demo_env", "-o", str(where)], check=True,
                   capture_output=True, timeout=120)
    assert (where / "demo_env" / "server" / "demo_env_environment.py").is_file()
    sys.path.insert(0, str(where))
    try:
        yield where
    finally:
        sys.path.remove(str(where))
        for name in [m for m in sys.modules if m == "demo_env" or m.startswith("demo_env.")]:
            del sys.modules[name]


async def test_openenv_init_template_passes_env_check(openenv_template: Path) -> None:
    report = await check_env(TemplateEcho(), "inprocess")
    failed = {r.name: r.detail for r in report.results if not r.ok}
    assert not failed, failed
    assert report.tasks == 2 and len(report.results) == 8
