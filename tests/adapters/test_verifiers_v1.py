"""The verifiers v1 adapter against real verifiers, once per version: 0.3's bundled ``verifiers.v1`` under
this interpreter and verifiers 0.4 in its side venv (a child process over a pipe). Oracle full reward,
a wrong reply 0, tools with per-rollout state, max_turns mirrored, the task's own weights."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from palaestra.core.errors import BadArguments, ConfigError, UnknownTool, VerifierError
from palaestra.core.records import Trajectory
from palaestra.envs.registry import load_env
from palaestra.rollout.conformance import check_env

FIXTURE = Path(__file__).resolve().parent / "vf_v1_envs.py"
VERSIONS = ["03", "04"]


@pytest.fixture(autouse=True, scope="module")
def _stop_children() -> Iterator[None]:
    yield
    from palaestra.adapters.verifiers_v1 import close_children

    close_children()


def _need(version: str) -> None:
    if version == "03":
        if importlib.util.find_spec("verifiers") is None or importlib.util.find_spec("verifiers.v1") is None:
            pytest.skip("verifiers: verifiers with its v1 API is not installed (pip install 'palaestra[verifiers]')")
    else:
        import vf_v1_envs

        why = vf_v1_envs.missing()
        if why:
            pytest.skip(f"verifiers-v1: {why}")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("cls", ["Arith", "Tools"])
async def test_v1_taskset_passes_env_check(version: str, cls: str, adapters_dir: Path) -> None:
    """The oracle (the answer field; tool calls for the tool taskset) scores 1 on every task, null 0."""
    _need(version)
    report = await check_env(f"{FIXTURE}:V{version}{cls}", "inprocess")
    failed = [f"{r.name}: {r.detail}" for r in report.results if not r.ok]
    assert not failed, failed
    assert report.tasks == 3


@pytest.mark.parametrize("version", VERSIONS)
async def test_v1_rows_weights_and_wrong_replies(version: str, adapters_dir: Path) -> None:
    _need(version)
    env = load_env(f"{FIXTURE}:V{version}Arith")
    tasks = env.examples()
    assert len(tasks) == 3 and env.verifiers_version.startswith("0.4" if version == "04" else "0.3")  # type: ignore[attr-defined]
    task = tasks[1]
    assert task.messages() == [{"role": "system", "content": "Reply with just the number."},
                               {"role": "user", "content": "What is 7 * 6?"}]
    assert task.metadata["answer"] == "42" and env.tool_schemas() == []
    state = env.seed(task)
    right = await env.verify(state, Trajectory(messages=task.messages() + [{"role": "assistant", "content": "42"}]))
    assert right.reward == pytest.approx(1.0) and right.passed
    assert right.metadata["weights"] == {"exact": 0.8, "short": 0.2}
    assert right.components == {"exact": 1.0, "short": 1.0, "turns": 1.0}
    wrong = await env.verify(state, Trajectory(final_answer="41"))
    assert wrong.reward == pytest.approx(0.2) and not wrong.passed and wrong.components["exact"] == 0.0
    verbose = await env.verify(state, Trajectory(final_answer="The answer is 42"))
    assert verbose.reward == 0.0 and not verbose.passed


@pytest.mark.parametrize("version", VERSIONS)
async def test_v1_toolset_tools_state_and_errors(version: str, adapters_dir: Path) -> None:
    _need(version)
    env = load_env(f"{FIXTURE}:V{version}Tools")
    assert {t["function"]["name"] for t in env.tool_schemas()} == {"calc_add", "calc_adds_so_far"}
    add = next(t for t in env.tool_schemas() if t["function"]["name"] == "calc_add")["function"]
    assert set(add["parameters"]["properties"]) == {"a", "b"} and add["description"] == "Add two integers."
    task = env.examples()[0]
    assert task.metadata["max_turns"] == 3
    one, two = env.seed(task), env.seed(task)
    assert await env.call_tool(one, "calc_add", {"a": 17, "b": 25}) == 42
    assert await env.call_tool(one, "calc_add", {"a": 1, "b": 1}) == 2
    # the toolset's vf.State is per rollout: the second session has made no addition yet
    assert await env.call_tool(one, "calc_adds_so_far", {}) == 2
    assert await env.call_tool(two, "calc_adds_so_far", {}) == 0
    with pytest.raises(BadArguments):
        await env.call_tool(one, "calc_add", {"a": "x", "b": 1})
    with pytest.raises(UnknownTool):
        await env.call_tool(one, "calc_sub", {"a": 1, "b": 1})
    await env.close(one)
    await env.close(two)


def _used_tool(task_messages: list[dict[str, object]]) -> Trajectory:
    call = {"id": "c1", "type": "function", "function": {"name": "calc_add", "arguments": '{"a": 17, "b": 25}'}}
    return Trajectory(messages=[*task_messages, {"role": "assistant", "content": None, "tool_calls": [call]},
                                {"role": "tool", "tool_call_id": "c1", "content": "42"},
                                {"role": "assistant", "content": "42"}])


@pytest.mark.parametrize("version", VERSIONS)
async def test_v1_max_turns_is_mirrored(version: str, adapters_dir: Path) -> None:
    """With the agent's max_turns=3 the tool turn and the answer are scored (1.0); with max_turns=1
    verifiers stops after the tool-calling turn, so the answer an agent gave later is not seen (0.5)."""
    _need(version)
    three = load_env(f"{FIXTURE}:V{version}Tools")
    task = three.examples()[0]
    full = await three.verify(three.seed(task), _used_tool(task.messages()))
    assert full.reward == pytest.approx(1.0) and full.components == {"correct": 1.0, "used_add": 1.0}
    guessed = await three.verify(three.seed(task), Trajectory(messages=[*task.messages(),
                                                                       {"role": "assistant", "content": "42"}]))
    assert guessed.reward == pytest.approx(0.5) and guessed.components["used_add"] == 0.0
    one = load_env(f"{FIXTURE}:V{version}OneTurn")
    first = one.examples()[0]
    assert first.metadata["max_turns"] == 1
    cut = await one.verify(one.seed(first), _used_tool(first.messages()))
    assert cut.reward == pytest.approx(0.5) and cut.components == {"correct": 0.0, "used_add": 1.0}


def test_a_missing_interpreter_or_taskset_is_a_clear_error() -> None:
    from palaestra.adapters.verifiers_v1 import VerifiersV1Environment

    class Nothing(VerifiersV1Environment):
        name = "vf1-nothing"

    with pytest.raises(ConfigError, match="does not say what to load"):
        Nothing().examples()

    class Elsewhere(VerifiersV1Environment):
        name = "vf1-elsewhere"
        taskset = "vf_v1_arith"
        python = "/nonexistent/bin/python"

    with pytest.raises(ConfigError, match="does not exist") as info:
        Elsewhere().examples()
    assert "setup-verifiers.sh" in (info.value.hint or "")


@pytest.mark.parametrize("version", VERSIONS)
def test_an_environment_that_drives_the_episode_is_refused_by_name(version: str, adapters_dir: Path) -> None:
    """verifiers' own OpenEnv taskset plays the user from its Env.run: not a tool-and-reward taskset, so
    the adapter refuses it up front (a ConfigError naming the Env class), never a silent 0."""
    _need(version)
    env = load_env(f"{FIXTURE}:V{version}OpenEnv")
    with pytest.raises(ConfigError, match="OpenEnvEnv drives the episode itself"):
        env.examples()


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_reward_function_that_raises_is_a_verifier_failure(version: str, adapters_dir: Path) -> None:
    """A broken grader is failed(verifier) with verifiers' own message, never a reward of 0."""
    _need(version)
    env = load_env(f"{FIXTURE}:V{version}Broken")
    [task] = env.examples()
    with pytest.raises(VerifierError, match="the grader broke") as info:
        await env.verify(env.seed(task), Trajectory(final_answer=str(task.metadata["answer"])))
    assert info.value.failure == "verifier"


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_dead_child_fails_its_sessions_and_is_replaced(version: str, adapters_dir: Path) -> None:
    """The verifiers process killed mid-rollout: that rollout's next call is failed(environment) (retried,
    never scored), and the next use starts a new process with the taskset loaded again."""
    from palaestra.adapters.verifiers_v1 import _CHILDREN
    from palaestra.core.errors import EnvironmentFailure

    _need(version)
    env = load_env(f"{FIXTURE}:V{version}Tools")
    task = env.examples()[0]
    state = env.seed(task)
    assert await env.call_tool(state, "calc_add", {"a": 1, "b": 2}) == 3
    first = _CHILDREN[type(env)]
    first._proc.kill()
    first._proc.wait()
    with pytest.raises(EnvironmentFailure) as info:
        await env.call_tool(state, "calc_add", {"a": 1, "b": 2})
    assert info.value.failure == "environment"
    fresh = env.seed(task)
    assert await env.call_tool(fresh, "calc_adds_so_far", {}) == 0
    assert _CHILDREN[type(env)] is not first and _CHILDREN[type(env)].alive()
    await env.close(fresh)


def test_a_child_that_does_not_answer_in_time_is_stopped(adapters_dir: Path) -> None:
    from palaestra.core.errors import EnvironmentFailure

    _need("03")
    env = load_env(f"{FIXTURE}:V03Impatient")
    with pytest.raises(EnvironmentFailure, match="did not answer 'load' within"):
        env.examples()
