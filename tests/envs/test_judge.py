from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from palaestra.agents.tool_agent import ToolAgent
from palaestra.core.errors import ConfigError, InfraError, InvalidTask
from palaestra.core.records import Task, Trajectory
from palaestra.envs.judge.env import ENV_MODEL, ENV_MODEL_NAME, Judge
from palaestra.envs.judge.judges import PROMPT_HASH, parse_score, parse_verdict
from palaestra.models.openai_http import OpenAIBackend
from palaestra.models.scripted import ScriptedBackend
from palaestra.orchestrator import run_eval
from palaestra.placement import mount_env
from palaestra.rollout.config import RunConfig
from palaestra.rollout.runner import run_rollout
from palaestra.server.loopback import serve_app
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import ModelProxy
from palaestra.server.ports import free_port


def _judge_server(text: str) -> Any:
    """The model server Palaestra ships (``palaestra model serve --backend scripted --policy constant``)."""
    return serve_app(create_model_app(ModelProxy(ScriptedBackend("constant", constant_text=text))), path="/v1")


class _Counting:
    """A chat-completions server that answers the same text and counts requests."""

    def __init__(self, text: str) -> None:
        self.text, self.calls = text, 0

    async def chat(self, request: Request) -> JSONResponse:
        self.calls += 1
        return JSONResponse({"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": self.text}, "finish_reason": "stop"}]})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])


ABSOLUTE = Task(id="abs", env="judge", input="Capital of France?", metadata={"reference_answer": "Paris"})
PAIRWISE = Task(id="pair", env="judge", input="Explain X.",
                metadata={"mode": "pairwise", "reference_answer": "baseline", "key_points": ["alpha", "beta"]})


def _answer(text: str) -> Trajectory:
    return Trajectory(final_answer=text)


async def test_bundled_rows_ask_for_the_keyword_judge_which_gives_the_oracle_full_marks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MODEL, raising=False)
    env = Judge()
    tasks = env.examples()
    assert len(tasks) >= 20 and {t.metadata.get("mode", "absolute") for t in tasks} == {"absolute", "pairwise"}
    for task in tasks:
        assert task.metadata["judge_model"] == "keyword"  # asked for by name, not a fallback
        env.check_task(task)
        ref = env.reference(task)
        assert ref is not None and ref.final_answer
        good = await env.verify(task, _answer(ref.final_answer))
        assert good.reward == 1.0 and good.passed, (task.id, good.metadata)
        assert good.metadata["judge"]["kind"] == "keyword" and good.metadata["judge"]["prompt_hash"] == PROMPT_HASH
        empty = await env.verify(task, _answer(""))
        assert empty.reward == 0.0 and empty.metadata["reason"] == "empty_answer"
        assert empty.metadata["judge"] == {"kind": "rule", "rule": "empty_answer"}


async def test_offline_judge_grades_key_points_and_pairwise_outcomes() -> None:
    env = Judge(judge="keyword")
    task = Task(id="k", input="?", metadata={"key_points": ["alpha", ["beta", "b-side"]], "reference_answer": "x"})
    half = await env.verify(task, _answer("Only ALPHA here."))
    assert half.reward == 0.5 and not half.passed and half.metadata["judge_reply"].endswith("Score: 5")
    assert (await env.verify(task, _answer("alpha and the b side"))).reward == 1.0
    assert (await env.verify(ABSOLUTE, _answer("It is paris."))).passed
    assert (await env.verify(PAIRWISE, _answer("alpha and beta"))).metadata["orders"] == ["win", "win"]
    loss = await env.verify(PAIRWISE, _answer("nothing useful"))
    assert loss.metadata["outcome"] == "tie" and loss.reward == 0.5  # baseline covers nothing either
    worse = Task(id="w", input="?", metadata={"mode": "pairwise", "reference_answer": "alpha beta",
                                              "key_points": ["alpha", "beta"], "tie_score": 0.25})
    assert (await env.verify(worse, _answer("alpha"))).reward == 0.0
    assert (await env.verify(worse, _answer("alpha and beta"))).reward == 0.25


def test_score_and_verdict_parsing() -> None:
    assert parse_score("Good.\nScore: 7") == 0.7
    assert parse_score("score: 3 ... final **Score: 9/10**") == 0.9
    assert parse_score("Rating [[4]]") == 0.4
    assert parse_score("Score: 8/8") == 1.0
    assert parse_score("Score: 12") is None and parse_score("great answer") is None
    assert parse_verdict("[[A]] hmm, no: [[B]]") == "B"
    assert parse_verdict("[[ C ]]") == "C" and parse_verdict("A is better") is None


async def test_a_real_judge_server_grades_over_http() -> None:
    with _judge_server("The answer is right but terse.\nScore: 8") as url:
        env = Judge(judge=url, judge_model_name="grader-1")
        verdict = await env.verify(ABSOLUTE, _answer("Paris"))
        assert (await env.verify(ABSOLUTE, _answer("Paris"))).reward == 0.8  # the backend is reused
        await env.aclose()
    assert verdict.reward == 0.8 and verdict.passed and "Score: 8" in verdict.metadata["judge_reply"]
    who = verdict.metadata["judge"]
    assert who["kind"] == "model" and who["endpoint"] == url and who["model"] == "grader-1"
    assert who["prompt_hash"] == PROMPT_HASH and who.get("model_reported")  # the name the server answered with


async def test_the_judge_model_comes_from_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables are read at the edge (Settings) and handed to the environment, which wins over a row's."""
    from palaestra.envs.registry import load_env
    from palaestra.rollout.config import RunConfig, env_options, resolve
    from palaestra.settings import Settings

    with _judge_server("Score: 2") as url:
        monkeypatch.setenv(ENV_MODEL, url)
        monkeypatch.setenv(ENV_MODEL_NAME, "grader-2")
        task = ABSOLUTE.model_copy(update={"metadata": {**ABSOLUTE.metadata, "judge_model": "scripted:null"}})
        cfg, sources = resolve({}, None, Settings.from_env())
        assert isinstance(cfg, RunConfig) and sources["judge_model"] == f"env {ENV_MODEL}"
        env = load_env("judge", env_options(cfg))
        assert isinstance(env, Judge)
        verdict = await env.verify(task, _answer("Lyon"))
        await env.aclose()
    assert verdict.reward == 0.2 and not verdict.passed
    assert verdict.metadata["judge"]["endpoint"] == url and verdict.metadata["judge"]["model"] == "grader-2"


async def test_pairwise_swaps_the_order_and_an_inconsistent_judge_is_a_tie() -> None:
    with _judge_server("Answer A is better.\n[[A]]") as url:
        env = Judge(judge=url)
        verdict = await env.verify(PAIRWISE, _answer("alpha beta"))
        await env.aclose()
    assert verdict.metadata["orders"] == ["win", "loss"] and verdict.metadata["outcome"] == "tie"
    assert verdict.reward == 0.5 and verdict.components == {"preference": 0.5, "consistent": 0.0}
    no_swap = PAIRWISE.model_copy(update={"metadata": {**PAIRWISE.metadata, "swap": False}})
    with _judge_server("[[A]]") as url:
        env = Judge(judge=url)
        assert (await env.verify(no_swap, _answer("alpha beta"))).reward == 1.0
        await env.aclose()


async def test_an_unreadable_judge_is_retried_then_fails_as_judge_not_zero() -> None:
    server = _Counting("I would rather not grade this.")
    with serve_app(server.app(), path="/v1") as url:
        env = Judge(judge=url, retries=2)
        with pytest.raises(InfraError) as err:
            await env.verify(ABSOLUTE, _answer("Paris"))
        await env.aclose()
    assert err.value.failure == "judge" and server.calls == 3
    assert "unreadable reply" in str(err.value)


async def test_an_unreachable_judge_fails_as_judge() -> None:
    port = free_port()  # a port nobody listens on
    backend = OpenAIBackend(f"http://127.0.0.1:{port}/v1", max_retries=0, timeout=5)
    try:
        with pytest.raises(InfraError) as err:
            await Judge(judge=backend, retries=1).verify(ABSOLUTE, _answer("Paris"))
    finally:
        await backend.aclose()
    assert err.value.failure == "judge" and "call failed" in str(err.value)


def test_tasks_without_anything_to_grade_against_are_invalid() -> None:
    with pytest.raises(InvalidTask, match="nothing to grade against"):
        Judge().check_task(Task(id="t", input="?"))
    with pytest.raises(InvalidTask, match="pairwise mode needs"):
        Judge().check_task(Task(id="t", input="?", metadata={"mode": "pairwise", "rubric": "r"}))
    with pytest.raises(InvalidTask, match="unknown metadata.mode"):
        Judge().check_task(Task(id="t", input="?", metadata={"mode": "elo", "rubric": "r"}))


async def test_a_rollout_with_a_failing_judge_is_failed_judge() -> None:
    server = _Counting("no score here")
    with serve_app(server.app(), path="/v1") as url:
        env = Judge(judge=url)
        mounted = await mount_env(env, "inprocess")
        try:
            rollout = await run_rollout(ABSOLUTE, env=mounted.client, agent=ToolAgent(),
                                        proxy=ModelProxy(ScriptedBackend("constant", constant_text="Paris")),
                                        model_name="scripted:constant", deadline_s=30)
        finally:
            await mounted.stop()
            await env.aclose()
    assert rollout.outcome.status == "failed" and rollout.outcome.kind == "judge"


async def test_without_a_judge_grading_is_failed_judge_not_a_silent_keyword_match(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MODEL, raising=False)
    env = Judge()
    with pytest.raises(InfraError) as err:
        await env.verify(ABSOLUTE, _answer("Paris"))
    assert err.value.failure == "judge" and "no judge model is configured" in str(err.value)
    assert ENV_MODEL in (err.value.hint or "") and "keyword" in (err.value.hint or "")
    with pytest.raises(ConfigError, match="no judge model is configured for 1 judge task"):
        env.preflight([ABSOLUTE])
    asked = ABSOLUTE.model_copy(update={"metadata": {**ABSOLUTE.metadata, "judge_model": "keyword"}})
    assert env.preflight([asked])["judge"]["kind"] == "keyword"
    assert (await env.verify(asked, _answer("It is Paris."))).metadata["judge"]["kind"] == "keyword"


async def test_a_rollout_without_a_judge_is_failed_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MODEL, raising=False)
    env = Judge()
    mounted = await mount_env(env, "inprocess")
    try:
        rollout = await run_rollout(ABSOLUTE, env=mounted.client, agent=ToolAgent(),
                                    proxy=ModelProxy(ScriptedBackend("constant", constant_text="Paris")),
                                    model_name="scripted:constant", deadline_s=30)
    finally:
        await mounted.stop()
    assert rollout.outcome.status == "failed" and rollout.outcome.kind == "judge"
    assert "no judge model is configured" in (rollout.outcome.message or "") and rollout.verdict is None


def _rows(path: Path, judge_model: str | None) -> str:
    meta: dict[str, Any] = {"reference_answer": "Paris"}
    if judge_model:
        meta["judge_model"] = judge_model
    path.write_text("".join(json.dumps({"id": f"q{i}", "env": "judge", "input": "Capital of France?",
                                        "metadata": meta}) + "\n" for i in range(3)))
    return str(path)


async def test_an_eval_run_without_a_judge_refuses_before_it_starts(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MODEL, raising=False)
    out = tmp_path / "run"
    cfg = RunConfig(input=_rows(tmp_path / "rows.jsonl", None), model="scripted:constant?text=Paris",
                    out=str(out), placement="direct")
    with pytest.raises(ConfigError, match="no judge model is configured for 3 judge task") as err:
        await run_eval(cfg)
    assert ENV_MODEL in (err.value.hint or "")
    assert not (out / "run.json").exists() and not (out / "rollouts.jsonl").exists()


async def test_run_json_and_metrics_say_which_judge_graded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MODEL, raising=False)
    out = tmp_path / "kw"
    cfg = RunConfig(input=_rows(tmp_path / "kw.jsonl", "keyword"), model="scripted:constant?text=Paris",
                    out=str(out), placement="direct")
    result = await run_eval(cfg)
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["envs"]["judge"]["judge"]["kind"] == "keyword"
    assert manifest["envs"]["judge"]["judge"]["prompt_hash"] == PROMPT_HASH
    hook = result.metrics["env_metrics"]["judge"]
    assert hook["keyword_graded"] == 3 and list(hook["graded_by"]) == ["keyword (offline matcher, not an LLM)"]

    with _judge_server("Correct.\nScore: 9") as url:
        out = tmp_path / "model"
        cfg = RunConfig(input=_rows(tmp_path / "m.jsonl", None), model="scripted:constant?text=Paris",
                        out=str(out), placement="direct", judge_model=url, judge_model_name="grader-3")
        result = await run_eval(cfg)
    judge = json.loads((out / "run.json").read_text())["envs"]["judge"]["judge"]
    assert judge == {"kind": "model", "model": "grader-3", "endpoint": url, "prompt_hash": PROMPT_HASH}
    hook = result.metrics["env_metrics"]["judge"]
    assert "keyword_graded" not in hook and sum(hook["graded_by"].values()) == 3
    assert all(label.startswith("model:") and url in label for label in hook["graded_by"])
