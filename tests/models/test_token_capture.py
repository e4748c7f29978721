"""--capture-tokens asks an OpenAI-compatible server for token ids; what came back is recorded plainly."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from palaestra.orchestrator import run_eval
from palaestra.rollout.config import RunConfig
from palaestra.server.loopback import serve_app


async def _chat(request: Request) -> JSONResponse:
    """A vLLM-like server: token ids only when asked with return_token_ids, logprobs only with logprobs."""
    body = await request.json()
    choice: dict = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "\\boxed{A}"}}
    out: dict = {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
                 "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
    if body.get("return_token_ids"):
        out["prompt_token_ids"] = [1, 2, 3, 4, 5]
        choice["token_ids"] = [7, 8, 9]
    if body.get("logprobs"):
        choice["logprobs"] = {"content": [{"token": t, "logprob": -0.5, "top_logprobs": []} for t in "abc"]}
    return JSONResponse(out)


@pytest.fixture
def vllm_like() -> Iterator[str]:
    with serve_app(Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])]), path="/v1") as url:
        yield url


@pytest.mark.parametrize(("capture", "expected"), [(True, "ids+logprobs"), (False, "none")])
async def test_capture_tokens_from_an_openai_compatible_server(vllm_like: str, tmp_path: Path, capture: bool,
                                                               expected: str) -> None:
    await run_eval(RunConfig(env="mcqa", limit=2, model=vllm_like, capture_tokens=capture, out=str(tmp_path / "r")))
    await asyncio.sleep(0)
    for line in (tmp_path / "r" / "rollouts.jsonl").read_text().splitlines():
        call = json.loads(line)["trajectory"]["model_calls"][0]
        assert call["token_capture"] == expected
        if capture:
            assert call["prompt_token_ids"] == [1, 2, 3, 4, 5] and call["generation_token_ids"] == [7, 8, 9]
            assert call["generation_logprobs"] == [-0.5, -0.5, -0.5]
        else:
            assert call["generation_token_ids"] is None
