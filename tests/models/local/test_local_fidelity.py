"""The local model through the proxy and the official openai client: ``n`` real samples, per-token logprobs
with ``top_logprobs`` in chat and in the Responses API, and a 400 naming a control it does not implement."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="openai: the openai package is not installed (the [dev] extra)")

pytestmark = pytest.mark.timeout(300)

MESSAGES = [{"role": "user", "content": "Write one word about the sea."}]


@pytest.fixture
def client(local_backend: Any, live_server: Callable[[Any], str]) -> Any:
    from palaestra.server.model_app import create_model_app
    from palaestra.server.model_proxy import ModelProxy

    url = live_server(create_model_app(ModelProxy(local_backend)))
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)
    yield sdk
    sdk.close()


def test_n_samples_differ_and_carry_logprobs(client: Any) -> None:
    chat = client.chat.completions.create(model="local", messages=MESSAGES, n=4, max_tokens=12, temperature=1.0,
                                          seed=7, logprobs=True, top_logprobs=3)
    assert [c.index for c in chat.choices] == [0, 1, 2, 3]
    tokens = [tuple(c.model_extra["token_ids"]) for c in chat.choices]
    assert len(set(tokens)) > 1  # real samples, not one answer copied
    for choice in chat.choices:
        entries = choice.logprobs.content
        assert len(entries) == len(choice.model_extra["token_ids"])
        for entry in entries:
            assert entry.logprob <= 0.0 and len(entry.top_logprobs) == 3
            tops = [t.logprob for t in entry.top_logprobs]
            assert tops == sorted(tops, reverse=True) and entry.logprob <= tops[0] + 1e-5
            assert math.exp(tops[0]) <= 1.0 + 1e-5


def test_responses_top_logprobs(client: Any) -> None:
    resp = client.responses.create(model="local", input="Say hi.", max_output_tokens=6, temperature=0,
                                   top_logprobs=2, include=["message.output_text.logprobs"])
    part = resp.output[0].content[0]
    assert part.logprobs and all(len(lp.top_logprobs) == 2 for lp in part.logprobs)
    assert len(part.logprobs) == resp.usage.output_tokens  # one entry per generated token
    assert all(lp.logprob <= lp.top_logprobs[0].logprob + 1e-5 for lp in part.logprobs)


def test_unimplemented_control_is_a_400_naming_it(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="local", messages=MESSAGES, max_tokens=4, presence_penalty=0.5)
    assert err.value.body["param"] == "presence_penalty"
