"""Agreement between verifiers' own rollout and Palaestra's verdict (classic API, verifiers 0.3).

verifiers runs each environment itself (``env.evaluate``: its own rollout loop, its own tool execution,
its own ``max_turns`` stop, its own rubric) against a scripted chat model served on 127.0.0.1. The
script plays Palaestra's oracle (the adapter's reference: tool calls, then the final answer) or a wrong
reply. Each conversation verifiers recorded is then scored by the Palaestra adapter: the two rewards
must be equal, case by case, and the oracle must reach full reward in verifiers' own hands too."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verifiers", reason="verifiers: verifiers is not installed (pip install 'palaestra[verifiers]')")

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from palaestra.core.records import Task, Trajectory
from palaestra.envs.registry import load_env
from palaestra.server.loopback import serve_app

FIXTURE = Path(__file__).resolve().parent / "vf_envs.py"
KEY_VAR = "PALAESTRA_TEST_SCRIPTED_KEY"


def _prompt_key(messages: list[dict[str, Any]]) -> str:
    """The conversation's first user message: what a task's script is looked up by."""
    return next(str(m.get("content")) for m in messages if m.get("role") == "user")


def _oracle_turns(env: Any, task: Task) -> list[dict[str, Any]]:
    """The adapter's reference as chat turns: one turn with its tool calls (parallel or one per turn),
    then the final answer."""
    ref = env.reference(task)
    assert ref is not None
    calls = [{"id": f"call_{i}", "type": "function",
              "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for i, c in enumerate(ref.tool_calls)]
    turns: list[dict[str, Any]] = []
    if calls:
        groups = [calls] if ref.parallel else [[c] for c in calls]
        turns += [{"role": "assistant", "content": None, "tool_calls": g} for g in groups]
    turns.append({"role": "assistant", "content": ref.final_answer or ""})
    return turns


def _chat_app(scripts: dict[str, list[dict[str, Any]]]) -> Starlette:
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        script = scripts[_prompt_key(body["messages"])]
        turn = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        message = script[min(turn, len(script) - 1)]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return JSONResponse({"id": f"chatcmpl-{turn}", "object": "chat.completion", "created": int(time.time()),
                             "model": body.get("model", "scripted"),
                             "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


CASES = [("VfArith", "oracle"), ("VfArith", "wrong"), ("VfAdder", "oracle"), ("VfAdder", "wrong"),
         ("VfToolTest", "oracle"), ("VfToolTest", "wrong"), ("VfReasoningGym", "oracle"),
         ("VfReasoningGym", "wrong")]


@pytest.mark.parametrize(("cls", "policy"), CASES)
async def test_verifiers_own_rollout_agrees_with_the_verdict(cls: str, policy: str, adapters_dir: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.types import ClientConfig

    monkeypatch.setenv(KEY_VAR, "scripted")
    env = load_env(f"{FIXTURE}:{cls}")
    tasks = {_prompt_key(t.messages()): t for t in env.examples()}
    wrong = [{"role": "assistant", "content": "I do not know."}]
    scripts = {k: (_oracle_turns(env, t) if policy == "oracle" else wrong) for k, t in tasks.items()}
    with serve_app(_chat_app(scripts)) as url:
        client = ClientConfig(api_base_url=f"{url}/v1", api_key_var=KEY_VAR, max_retries=0)
        results = await env.vf_env.evaluate(client=client, model="scripted", num_examples=-1,
                                            rollouts_per_example=1, on_progress=lambda *a, **k: None)
    outputs = results["outputs"]
    assert len(outputs) == len(tasks)
    for out in outputs:
        assert not out.get("error"), out.get("error")
        task = tasks[_prompt_key(out["prompt"])]
        conversation = [*task.messages(), *[_plain(m) for m in out["completion"]]]
        verdict = await env.verify(env.seed(task), Trajectory(messages=conversation))
        assert verdict.reward == pytest.approx(out["reward"]), (task.id, out["completion"])
        if policy == "oracle":
            assert out["reward"] == pytest.approx(1.0) and verdict.passed, task.id
        else:
            assert out["reward"] == pytest.approx(0.0) and not verdict.passed, task.id


def _plain(message: Any) -> dict[str, Any]:
    """A message verifiers recorded (a pydantic model or a dict) as a chat dict."""
    data = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    calls = data.get("tool_calls")
    if calls:  # serialized outputs keep each call as a JSON string of verifiers' flat {id, name, arguments}
        flat = [json.loads(c) if isinstance(c, str) else c for c in calls]
        data["tool_calls"] = [c if "function" in c else {"id": c["id"], "type": "function",
                                                         "function": {"name": c["name"], "arguments": c["arguments"]}}
                              for c in flat]
    return data
