"""NeMo Gym rows as NeMo Gym publishes them: Responses input with reasoning items, function calls and their
outputs, flat Responses tools, ``tool_choice`` / ``parallel_tool_calls``, and ``agent_ref`` routing, through
the row reader, the exact Responses → Chat translation (checked at a real chat server on 127.0.0.1, which
sees what the model sees), and whole runs scored with the oracle. Fixture rows are copied from the NeMo Gym
wheel (tests/fixtures/data/nemo_gym/README.md); the wheel-backed tests read every example row of the same
families from the installed wheel."""

from __future__ import annotations

import json
import runpy
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from palaestra.adapters import nemo_gym_rows
from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig, resolve
from palaestra.rollout.tasks import load_task_file
from palaestra.server.loopback import serve_app
from palaestra.wire.anthropic import messages_to_chat
from palaestra.wire.responses import responses_to_chat

FIXTURES = Path(__file__).parents[1] / "fixtures"
ROWS = FIXTURES / "data" / "nemo_gym"
NG = SimpleNamespace(**runpy.run_path(str(FIXTURES / "nemo_gym.py")))
SINGLE_STEP = ROWS / "single_step_tool_use_with_argument_comparison.jsonl"


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rewards(run_dir: Path) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for line in (run_dir / "rollouts.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[r["task_id"]] = (r.get("verdict") or {}).get("reward")
    return out


def wheel_resources() -> Path:
    """The installed wheel's resources_servers folder (skip, worded for tests/conftest.py, when absent)."""
    reason = NG.missing()
    if reason is not None:
        pytest.skip(f"nemo-gym: {reason}")
    found = sorted(NG.venv_dir().glob("lib/python3*/site-packages/resources_servers"))
    if not found:
        pytest.skip(f"nemo-gym: the venv at {NG.venv_dir()} has no resources_servers package")
    return found[0]


# ---- what the chat model is sent, built here from the raw row (independently of the translator) ----------
def expected_chat(row: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The chat messages and tools a row's Responses input means, written out by hand: a reasoning item's
    summary goes on the assistant turn that follows it, function calls join that turn, outputs are tool
    messages, content parts become their text, flat tools take the chat ``function`` wrapper."""
    messages: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for item in row["responses_create_params"]["input"]:
        kind = item.get("type", "message")
        if kind == "reasoning":
            reasoning.append("\n\n".join(p["text"] for p in item["summary"]))
        elif kind == "message":
            content = item["content"]
            text = content if isinstance(content, str) else "".join(p["text"] for p in content)
            messages.append({"role": item["role"], "content": text})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if messages[-1]["role"] == "assistant":
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
            reasoning.clear()
            continue
        if reasoning and messages[-1]["role"] == "assistant":
            messages[-1]["reasoning_content"] = "\n\n".join(reasoning)
            reasoning.clear()
    tools = [{"type": "function", "function": {k: t[k] for k in ("name", "parameters", "description", "strict")
                                               if k in t}}
             for t in row["responses_create_params"]["tools"]]
    return messages, tools


def test_every_input_item_type_is_read_and_translated_exactly() -> None:
    loaded = load_task_file(SINGLE_STEP, "tool_call")
    assert not loaded.problems, [str(p) for p in loaded.problems]
    kinds: set[str] = set()
    for row, task in zip(rows_of(SINGLE_STEP), loaded.tasks, strict=True):
        kinds |= {i.get("type", "message") for i in row["responses_create_params"]["input"]}
        messages, tools = expected_chat(row)
        assert task.input == messages
        assert task.tools == tools and len(tools) == 14
        # the request itself is kept as NeMo Gym wrote it, for exports and Responses-speaking consumers
        assert task.metadata[nemo_gym_rows.REQUEST_KEY] == row["responses_create_params"]
    assert kinds == {"message", "reasoning", "function_call", "function_call_output"}
    first = loaded.tasks[0].input
    assert isinstance(first, list) and first[2]["role"] == "assistant" and first[2]["reasoning_content"]


def test_reasoning_modes_and_chat_style_tools() -> None:
    body = {"input": [{"role": "user", "content": "q"},
                      {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s1"},
                                                                      {"type": "summary_text", "text": "s2"}]},
                      {"type": "reasoning", "id": "rs_2", "summary": [],
                       "content": [{"type": "reasoning_text", "text": "raw"}]},
                      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c1", "output": "ok"},
                      {"type": "reasoning", "id": "rs_3", "summary": [{"type": "summary_text", "text": "orphan"}]},
                      {"role": "user", "content": [{"type": "input_text", "text": "again"}]}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
                      {"type": "function", "name": "g", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "g"}, "parallel_tool_calls": False,
            "temperature": 0.3, "top_p": 0.9, "max_output_tokens": 77}
    dropped = responses_to_chat(body)  # the proxy's default: a plain chat API has no reasoning field
    assert "reasoning_content" not in dropped["messages"][1]
    both = responses_to_chat(body, reasoning="both")
    turn = both["messages"][1]
    assert turn["reasoning_content"] == turn["reasoning"] == "s1\n\ns2\n\nraw"
    assert [m["role"] for m in both["messages"]] == ["user", "assistant", "tool", "user"]
    assert "orphan" not in json.dumps(both["messages"])  # reasoning no assistant output followed
    assert both["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
                             {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}]
    assert both["tool_choice"] == {"type": "function", "function": {"name": "g"}}
    assert (both["parallel_tool_calls"], both["temperature"], both["top_p"], both["max_tokens"]) == \
        (False, 0.3, 0.9, 77)


# ---- a chat server on 127.0.0.1 that records what it is sent and answers like the gold policy -------------
class GoldChat:
    """Answers each row's first call with the row's expected action, then a final text; keeps every request."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.requests: list[dict[str, Any]] = []
        self.gold = {json.dumps(r["responses_create_params"]["input"][-1]["content"] if "content" in
                                r["responses_create_params"]["input"][-1] else
                                r["responses_create_params"]["input"][-1]["output"]): r["expected_action"]
                     for r in rows}

    async def handle(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        last = body["messages"][-1]
        action = self.gold.get(json.dumps(last.get("content")))
        message: dict[str, Any] = {"role": "assistant", "content": "Done."}
        if action is not None and action["type"] == "function_call":
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_gold", "type": "function",
                 "function": {"name": action["name"], "arguments": action["arguments"]}}]}
        elif action is not None:
            message = {"role": "assistant", "content": action["content"]}
        return JSONResponse({"id": "x", "object": "chat.completion", "created": 1, "model": "gold",
                             "choices": [{"index": 0, "message": message,
                                          "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


@pytest.fixture
def gold_chat() -> Iterator[tuple[str, GoldChat]]:
    app = GoldChat(rows_of(SINGLE_STEP))
    with serve_app(Starlette(routes=[Route("/v1/chat/completions", app.handle, methods=["POST"])]), path="/v1") as url:
        yield url, app


async def test_the_chat_model_sees_exactly_the_translated_request(gold_chat: tuple[str, GoldChat],
                                                                    tmp_path: Path) -> None:
    url, server = gold_chat
    result = await run_eval(RunConfig(input=str(SINGLE_STEP), env="tool_call", model=url, out=str(tmp_path / "r")))
    rows = rows_of(SINGLE_STEP)
    for row in rows:
        messages, tools = expected_chat(row)
        sent = [r for r in server.requests if r["messages"] == messages]
        assert len(sent) == 1, "no request carried exactly the row's conversation"
        assert sent[0]["tools"] == tools
        assert sent[0]["tool_choice"] == "auto" and sent[0]["parallel_tool_calls"] is False
    assert set(rewards(tmp_path / "r").values()) == {1.0}
    assert result.metrics["overall"]["mean_reward"] == 1.0


# ---- end to end with the oracle ---------------------------------------------------------------------------
async def test_reasoning_and_flat_tool_rows_score_with_the_oracle(tmp_path: Path) -> None:
    for name, n in ((SINGLE_STEP, 3), (ROWS / "example_tool_call_multireward.jsonl", 5)):
        out = tmp_path / name.stem
        result = await run_eval(RunConfig(input=str(name), env="tool_call", model="scripted:oracle", out=str(out)))
        got = rewards(out)
        assert len(got) == n and set(got.values()) == {1.0}, got
        assert result.metrics["overall"]["mean_reward"] == 1.0


async def test_the_export_gives_back_each_rows_request_as_it_was(tmp_path: Path) -> None:
    from palaestra.adapters.nemo_gym import export_nemo_gym

    await run_eval(RunConfig(input=str(SINGLE_STEP), env="tool_call", model="scripted:oracle", out=str(tmp_path / "r")))
    export = export_nemo_gym(tmp_path / "r", tmp_path / "ng" / "rollouts.jsonl")
    originals = [r["responses_create_params"] for r in rows_of(SINGLE_STEP)]
    assert [m["responses_create_params"] for m in rows_of(export.materialized_inputs)] == originals
    results = rows_of(export.rollouts)
    assert [r["responses_create_params"] for r in results] == originals
    assert all(r["reward"] == 1.0 and r["expected_action"] and nemo_gym_rows.REQUEST_KEY not in r for r in results)
    assert all(r["response"]["parallel_tool_calls"] is False for r in results)


async def test_calls_in_the_rows_history_are_not_the_models(tmp_path: Path) -> None:
    """A model that only answers in text: zero where the row expects a call, full marks where the row expects
    a message, although the row's history (its input) holds earlier function calls in both cases."""
    out = tmp_path / "r"
    await run_eval(RunConfig(input=str(SINGLE_STEP), env="tool_call", model="scripted:constant?text=Hello",
                             out=str(out)))
    got = rewards(out)
    expected = {f"L{i}": 0.0 if r["expected_action"]["type"] == "function_call" else 1.0
                for i, r in enumerate(rows_of(SINGLE_STEP), 1)}
    assert got == expected and set(expected.values()) == {0.0, 1.0}


async def test_agent_ref_routes_rows_without_env(tmp_path: Path) -> None:
    gpqa = ROWS / "gpqa_diamond.jsonl"
    loaded = load_task_file(gpqa)  # no --env: agent_ref gpqa_diamond_simple_agent names the family
    assert not loaded.problems and {t.env for t in loaded.tasks} == {"mcqa"}
    result = await run_eval(RunConfig(input=str(gpqa), model="scripted:oracle", out=str(tmp_path / "r")))
    assert result.metrics["overall"]["mean_reward"] == 1.0 and len(rewards(tmp_path / "r")) == 5


def test_an_agent_ref_that_routes_nowhere_is_refused_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"responses_create_params": {"input": "hi"},
                                "agent_ref": {"type": "responses_api_agents", "name": "my_private_agent"}}) + "\n"
                    + json.dumps({"responses_create_params": {"input": "hi"}, "id": "2",
                                  "agent_ref": {"type": "responses_api_agents", "name": "iheval_simple_agent"}}) + "\n"
                    + json.dumps({"responses_create_params": {"input": "x", "tools": [{"type": "web_search"}]},
                                  "id": "3"}) + "\n")
    loaded = load_task_file(path)
    problems = loaded.problems
    # iheval has no native environment: its row routes to NeMo Gym's own server instead of being refused
    assert [(p.line, p.field) for p in problems] == [(1, "agent_ref"), (3, "responses_create_params.tools[0]")]
    assert "my_private_agent" in problems[0].message
    assert [t.env for t in loaded.tasks] == ["nemo_gym:iheval"]


# ---- NeMo Gym config files route rows ---------------------------------------------------------------------
NEMO_CONFIG = """\
exam_grader:
  resources_servers:
    mcqa:
      entrypoint: app.py
      domain: knowledge
exam_taker_agent:
  responses_api_agents:
    simple_agent:
      entrypoint: app.py
      resources_server:
        type: resources_servers
        name: exam_grader
      model_server:
        type: responses_api_models
        name: policy_model
      datasets:
      - name: example
        type: example
        jsonl_fpath: resources_servers/mcqa/data/example.jsonl
policy_model:
  responses_api_models:
    vllm_model:
      entrypoint: app.py
      base_url: http://127.0.0.1:1
"""


async def test_a_nemo_gym_config_routes_agent_ref_to_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "exam.yaml"
    config.write_text(NEMO_CONFIG)
    rows = tmp_path / "rows.jsonl"
    with rows.open("w") as fh:
        for row in rows_of(ROWS / "gpqa_diamond.jsonl"):
            fh.write(json.dumps({**row, "agent_ref": {"type": "responses_api_agents", "name": "exam_taker_agent"}})
                     + "\n")
    assert load_task_file(rows).problems  # the agent's name says nothing: without its config it routes nowhere
    cfg, sources = resolve({"input": str(rows), "model": "scripted:oracle", "out": str(tmp_path / "r")}, str(config))
    assert cfg.routes == {"exam_grader": "mcqa", "exam_taker_agent": "mcqa"}
    assert sources["routes"] == f"file {config}"
    result = await run_eval(cfg)
    assert result.metrics["overall"]["mean_reward"] == 1.0 and len(rewards(tmp_path / "r")) == 5


def test_a_nemo_gym_config_that_routes_nothing_is_refused(tmp_path: Path) -> None:
    from palaestra.core.errors import ConfigError

    config = tmp_path / "models.yaml"
    config.write_text("policy_model:\n  responses_api_models:\n    vllm_model:\n      entrypoint: app.py\n")
    with pytest.raises(ConfigError, match="defines no resources server or agent"):
        resolve({}, str(config))


# ---- Responses → Anthropic Messages → Chat is the same conversation ----------------------------------------
def parsed_arguments(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages with tool-call arguments parsed (Anthropic carries them as objects: spacing is not kept)."""
    out = []
    for m in messages:
        calls = [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                 for c in m.get("tool_calls") or []]
        out.append({**m, "tool_calls": calls} if calls else m)
    return out


def test_responses_to_anthropic_keeps_the_conversation() -> None:
    from palaestra.wire.anthropic import responses_to_messages

    for row in rows_of(SINGLE_STEP):
        params = row["responses_create_params"]
        anthropic = responses_to_messages(params)
        assert all(m["role"] in ("user", "assistant") for m in anthropic["messages"])
        direct = responses_to_chat(params)
        via = messages_to_chat(anthropic)
        assert parsed_arguments(via["messages"]) == parsed_arguments(direct["messages"])
        assert [t["function"]["name"] for t in via["tools"]] == [t["function"]["name"] for t in direct["tools"]]
        assert via.get("parallel_tool_calls") is False and via["tool_choice"] == "auto"


# ---- a model that speaks Responses gets the row's request unchanged ----------------------------------------
def test_chat_to_responses_is_the_inverse_of_responses_to_chat() -> None:
    from palaestra.wire.responses import chat_to_responses_request

    for row in rows_of(SINGLE_STEP):
        chat = responses_to_chat(row["responses_create_params"], reasoning="reasoning_content")
        back = responses_to_chat(chat_to_responses_request(chat), reasoning="reasoning_content")
        assert back == chat


class GoldResponses:
    """A Responses API server: the row's expected action for a row's own input, then a final message."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.requests: list[dict[str, Any]] = []
        self.rows = rows

    async def handle(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests.append(body)
        row = next((r for r in self.rows if r["responses_create_params"]["input"] == body["input"]), None)
        n = len(self.requests)
        done = {"type": "output_text", "text": "Done.", "annotations": []}
        output: list[dict[str, Any]] = [{"type": "message", "id": f"msg_{n}", "role": "assistant",
                                         "status": "completed", "content": [done]}]
        if row is not None:
            action = row["expected_action"]
            reasoning = {"type": "reasoning", "id": f"rs_{n}", "encrypted_content": f"opaque-{n}",
                         "summary": [{"type": "summary_text", "text": "thinking"}]}
            if action["type"] == "function_call":
                output = [reasoning, {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                                      "name": action["name"], "arguments": action["arguments"],
                                      "status": "completed"}]
            else:
                output = [reasoning, {**output[0], "content": [{"type": "output_text", "text": action["content"],
                                                                "annotations": []}]}]
        return JSONResponse({"id": f"resp_{n}", "object": "response", "created_at": 1, "model": "gold",
                             "status": "completed", "output": output,
                             "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}})


async def test_a_responses_model_is_sent_the_rows_request_unchanged(tmp_path: Path) -> None:
    server = GoldResponses(rows_of(SINGLE_STEP))
    with serve_app(Starlette(routes=[Route("/v1/responses", server.handle, methods=["POST"])]), path="/v1") as url:
        await run_eval(RunConfig(input=str(SINGLE_STEP), env="tool_call", model=f"responses:{url}",
                                 out=str(tmp_path / "r")))
    assert set(rewards(tmp_path / "r").values()) == {1.0}
    for row in rows_of(SINGLE_STEP):
        params = {k: v for k, v in row["responses_create_params"].items() if k != "stream"}  # transport only
        first = [r for r in server.requests if r["input"] == params["input"]]
        assert first == [params]  # every item, tool and setting as the row wrote it
        if row["expected_action"]["type"] == "function_call":
            # the next call appends the model's own output items (reasoning with its opaque content) and the result
            later = [r for r in server.requests if r["input"][:len(params["input"])] == params["input"]
                     and len(r["input"]) > len(params["input"])]
            assert len(later) == 1
            appended = later[0]["input"][len(params["input"]):]
            assert [i["type"] for i in appended] == ["reasoning", "function_call", "function_call_output"]
            assert appended[0]["encrypted_content"].startswith("opaque-") and appended[0]["id"].startswith("rs_")
            assert appended[1]["call_id"] == appended[2]["call_id"]
            assert {k: v for k, v in later[0].items() if k != "input"} == {k: v for k, v in params.items()
                                                                         if k != "input"}


# ---- the installed wheel's own files ----------------------------------------------------------------------
async def test_every_example_row_of_these_families_in_the_wheel_scores(tmp_path: Path) -> None:
    rs = wheel_resources()
    cases = [("single_step_tool_use_with_argument_comparison/data/example.jsonl", {"env": "tool_call"}),
             ("example_tool_call_multireward/data/example.jsonl", {"env": "tool_call"}),
             ("gpqa_diamond/data/example.jsonl", {}),
             ("mcqa/data/example.jsonl", {"env": "mcqa"}),
             ("structured_outputs/data/example.jsonl",
              {"config": "structured_outputs/configs/structured_outputs_v4.yaml"})]
    for i, (rel, how) in enumerate(cases):
        path = rs / rel
        flags = {"input": str(path), "model": "scripted:oracle", "out": str(tmp_path / str(i)), "env": how.get("env")}
        cfg, _ = resolve(flags, str(rs / how["config"]) if "config" in how else None)
        result = await run_eval(cfg)
        got = rewards(tmp_path / str(i))
        assert len(got) == len(rows_of(path)) and set(got.values()) == {1.0}, (rel, got)
        assert result.metrics["overall"]["mean_reward"] == 1.0
