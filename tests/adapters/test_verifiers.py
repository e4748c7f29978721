"""The verifiers adapter against the real ``verifiers`` package: environments written with its own API
(a dataset, a Rubric of reward functions, a ToolEnv with a Python tool) become Palaestra environments
whose tasks are the dataset's rows and whose rewards are the rubric's."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verifiers", reason="verifiers: verifiers is not installed (pip install 'palaestra[verifiers]')")

from palaestra.core.errors import BadArguments, ConfigError, ToolError, UnknownTool
from palaestra.core.records import Trajectory
from palaestra.envs.registry import load_env
from palaestra.rollout.conformance import check_env

FIXTURE = Path(__file__).resolve().parent / "vf_envs.py"


@pytest.mark.parametrize("cls", ["VfArith", "VfAdder", "VfToolTest"])
async def test_verifiers_environment_passes_env_check(cls: str, adapters_dir: Path) -> None:
    """env check plays the oracle (full reward on every task) and the null policy (zero) for real."""
    report = await check_env(f"{FIXTURE}:{cls}", "inprocess")
    failed = [f"{r.name}: {r.detail}" for r in report.results if not r.ok]
    assert not failed, failed
    assert report.tasks == 3


async def test_rows_become_tasks_and_the_rubric_scores(adapters_dir: Path) -> None:
    env = load_env(f"{FIXTURE}:VfArith")
    tasks = env.examples()
    assert [t.id for t in tasks] == ["vf-arith-0", "vf-arith-1", "vf-arith-2"]
    first = tasks[1]
    # the environment's system prompt (from verifiers_args) and the question, as verifiers formats them
    assert first.messages() == [{"role": "system", "content": "Reply with just the number."},
                                {"role": "user", "content": "What is 7 * 6?"}]
    assert first.metadata["answer"] == "42" and "prompt" not in first.metadata["vf_row"]
    assert env.tool_schemas() == []

    state = env.seed(first)
    right = await env.verify(state, Trajectory(messages=first.messages() + [{"role": "assistant", "content": "42"}]))
    assert right.reward == pytest.approx(1.0) and right.passed
    assert right.components == {"exact_answer": 1.0, "short_answer": 1.0, "num_turns": 1.0}
    wrong = await env.verify(state, Trajectory(final_answer="41"))  # no messages: the final answer alone counts
    assert wrong.reward == pytest.approx(0.2) and not wrong.passed
    assert wrong.components == {"exact_answer": 0.0, "short_answer": 1.0, "num_turns": 1.0}
    verbose = await env.verify(state, Trajectory(final_answer="The answer is 42"))
    assert verbose.reward == 0.0


async def test_tool_env_tools_and_tool_use_in_the_rubric(adapters_dir: Path) -> None:
    env = load_env(f"{FIXTURE}:VfAdder")
    [schema] = env.tool_schemas()
    fn = schema["function"]
    assert fn["name"] == "add" and set(fn["parameters"]["properties"]) == {"a", "b"}
    task = env.examples()[0]  # 17 + 25
    state = env.seed(task)
    assert await env.call_tool(state, "add", {"a": 17, "b": 25}) == 42
    with pytest.raises(BadArguments):
        await env.call_tool(state, "add", {"a": "x", "b": 1})
    with pytest.raises(UnknownTool):
        await env.call_tool(state, "sub", {"a": 1, "b": 1})
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 17, "b": 25}'}}
    used = Trajectory(messages=task.messages() + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": "42"}])
    verdict = await env.verify(state, used)
    assert verdict.reward == pytest.approx(1.0) and verdict.components["used_add"] == 1.0
    # verifiers' own ToolEnv / MultiTurnEnv metrics (weight 0) see the same conversation
    assert verdict.components["total_tool_calls"] == 1.0 and verdict.components["num_turns"] == 2.0
    guessed = await env.verify(state, Trajectory(messages=task.messages() + [{"role": "assistant", "content": "42"}]))
    assert guessed.reward == pytest.approx(0.5) and guessed.components["used_add"] == 0.0


async def test_a_tool_that_raises_answers_the_model(adapters_dir: Path) -> None:
    env = load_env(f"{FIXTURE}:VfAdder")
    env.vf_env.tool_map["add"] = lambda a, b: (_ for _ in ()).throw(OverflowError("too big"))
    try:
        with pytest.raises(ToolError, match="OverflowError: too big"):
            await env.call_tool(env.seed(env.examples()[0]), "add", {"a": 1, "b": 2})
    finally:
        from vf_envs import add

        env.vf_env.tool_map["add"] = add


def test_nothing_to_load_is_a_clear_error() -> None:
    from palaestra.adapters.verifiers import VerifiersEnvironment

    class Empty(VerifiersEnvironment):
        name = "vf-empty"

    with pytest.raises(ConfigError, match="does not say what to load") as info:
        Empty().examples()
    assert "verifiers_env" in (info.value.hint or "")


async def test_reasoning_gym_reference_is_the_entry_answer_not_the_index(adapters_dir: Path) -> None:
    """verifiers' reasoning-gym integration keeps an index in its answer column: the reference is the
    reasoning-gym entry's answer in the environment's ``<answer>`` format; it scores 1, a blank reply 0."""
    env = load_env(f"{FIXTURE}:VfReasoningGym")
    tasks = env.examples()
    assert len(tasks) == 4
    for task in tasks:
        index = int(task.metadata["answer"])
        truth = str(env.vf_env.rg_dataset[index]["answer"])
        ref = env.reference(task)
        assert ref is not None and ref.final_answer is not None
        assert env.vf_env.parser.parse_answer([{"role": "assistant", "content": ref.final_answer}]) == truth
        state = env.seed(task)
        right = await env.verify(state, Trajectory(messages=task.messages() + [
            {"role": "assistant", "content": ref.final_answer}]))
        assert right.reward == pytest.approx(1.0) and right.passed
        assert right.metadata["weights"] == {"check_answer_reward_func": 1.0, "format_reward_func": 0.0}
        index_only = await env.verify(state, Trajectory(final_answer=f"<answer>{index}</answer>"))
        assert index_only.reward == 0.0
        blank = await env.verify(state, Trajectory(final_answer=""))
        assert blank.reward == 0.0


async def test_reasoning_gym_env_passes_env_check(adapters_dir: Path) -> None:
    report = await check_env(f"{FIXTURE}:VfReasoningGym", "inprocess")
    failed = [f"{r.name}: {r.detail}" for r in report.results if not r.ok]
    assert not failed, failed
    assert report.tasks == 4


def _calls(names: list[str]) -> list[dict[str, object]]:
    args = {"tool_a": '{"x": 1}', "tool_b": '{"x": "s"}'}
    return [{"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": args[n]}}
            for i, n in enumerate(names)]


async def test_tool_test_shape_max_turns_is_mirrored(adapters_dir: Path) -> None:
    """A ``max_turns=1`` tool environment (verifiers' tool_test): the rubric reads the first model turn as
    verifiers leaves it, its tool calls last; later turns an agent makes are not verifiers' rollout."""
    env = load_env(f"{FIXTURE}:VfToolTest")
    tasks = env.examples()
    assert {t["function"]["name"] for t in env.tool_schemas()} == {"tool_a", "tool_b"}
    for task in tasks:
        assert task.metadata["max_turns"] == 1
        names = task.metadata["vf_row"]["info"]["tool_names"]
        state = env.seed(task)
        calls = _calls(names)
        results = [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
        # one turn calling every listed tool, answered by the tools, then a closing reply: reward 1
        parallel = task.messages() + [{"role": "assistant", "content": None, "tool_calls": calls}, *results,
                                      {"role": "assistant", "content": "done"}]
        verdict = await env.verify(state, Trajectory(messages=parallel))
        assert verdict.reward == pytest.approx(1.0), names
        assert verdict.metadata["weights"]["called_exactly"] == 1.0
        assert verdict.components["total_tool_calls"] == float(len(names))
        null = await env.verify(state, Trajectory(messages=task.messages() + [{"role": "assistant", "content": ""}]))
        assert null.reward == 0.0
    # the two tools called one per turn: verifiers stops after the first turn, so the rubric sees one call
    two = next(t for t in tasks if len(t.metadata["vf_row"]["info"]["tool_names"]) == 2)
    first, second = _calls(two.metadata["vf_row"]["info"]["tool_names"])
    sequential = two.messages() + [
        {"role": "assistant", "content": None, "tool_calls": [first]},
        {"role": "tool", "tool_call_id": first["id"], "content": "ok"},
        {"role": "assistant", "content": None, "tool_calls": [second]},
        {"role": "tool", "tool_call_id": second["id"], "content": "ok"}]
    verdict = await env.verify(env.seed(two), Trajectory(messages=sequential))
    assert verdict.reward == 0.0 and verdict.components["total_tool_calls"] == 1.0


def test_a_v1_environment_is_refused_by_name() -> None:
    from palaestra.adapters.verifiers import VerifiersEnvironment

    v1 = pytest.importorskip("verifiers.v1", reason="this verifiers has no v1 API")

    class MyV1Env(v1.Env):  # type: ignore[misc]  # an environment written against verifiers' v1 API
        async def run(self, *args: object, **kwargs: object) -> None:
            return None

    class V1(VerifiersEnvironment):
        name = "vf-v1"

        def load_verifiers_env(self) -> object:
            return object.__new__(MyV1Env)

    with pytest.raises(ConfigError, match="verifiers v1 environment") as info:
        V1().examples()
    assert "0.4" in (info.value.hint or "")
