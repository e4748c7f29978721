"""The official openai SDK against the model proxy serving the local model on 127.0.0.1 (uvicorn)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="openai: the openai package is not installed (the [dev] extra)")

pytestmark = pytest.mark.timeout(300)

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture
def client(local_backend: Any, live_server: Callable[[Any], str]) -> Any:
    from palaestra.server.model_app import create_model_app
    from palaestra.server.model_proxy import ModelProxy

    proxy = ModelProxy(local_backend)
    url = live_server(create_model_app(proxy))
    sdk = openai.OpenAI(base_url=f"{url}/rollouts/r1/v1", api_key="unused", max_retries=0, timeout=120)
    sdk.proxy = proxy
    return sdk


def test_models_and_chat_with_token_ids(client: Any, loaded: Any) -> None:
    assert [m.id for m in client.models.list().data] == ["SmolLM2-135M-Instruct"]
    chat = client.chat.completions.create(model="local", messages=MESSAGES, max_tokens=8, temperature=0)
    choice = chat.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    extra = choice.model_extra or {}
    assert loaded.tokenizer.decode(extra["token_ids"], skip_special_tokens=True) == choice.message.content
    assert len(choice.logprobs.content) == len(extra["token_ids"]) == chat.usage.completion_tokens
    assert chat.model_extra["prompt_token_ids"][:1] == [loaded.tokenizer.convert_tokens_to_ids("<|im_start|>")]
    (record,) = client.proxy.pop_calls("r1")  # the proxy journaled the exact tokens
    assert record.generation_token_ids == extra["token_ids"]
    assert record.prompt_token_ids == chat.model_extra["prompt_token_ids"]
    assert record.generation_logprobs == [c.logprob for c in choice.logprobs.content]


def test_responses_and_streaming_agree_with_chat(client: Any) -> None:
    chat = client.chat.completions.create(model="local", messages=MESSAGES, max_tokens=8, temperature=0)
    text = chat.choices[0].message.content
    response = client.responses.create(model="local", input="What is the capital of France?",
                                       max_output_tokens=8, temperature=0)
    assert response.output_text == text
    stream = client.chat.completions.create(model="local", messages=MESSAGES, max_tokens=8, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == chat.usage.completion_tokens
