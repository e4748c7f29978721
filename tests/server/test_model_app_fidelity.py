"""The model server answers as the upstream APIs do: n choices, logprobs or a 400 naming them, stored
responses behind previous_response_id, and the upstream 400s for malformed requests.

Driven with the official openai and anthropic clients against the real server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from palaestra.models.scripted import ScriptedBackend
from palaestra.server.loopback import serve_app
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import ModelProxy

USER = [{"role": "user", "content": "say something"}]


@pytest.fixture
def served() -> Iterator[tuple[ModelProxy, str]]:
    proxy = ModelProxy(ScriptedBackend("echo"), max_stored_responses=3)
    with serve_app(create_model_app(proxy)) as url:
        yield proxy, url


@pytest.fixture
def oai(served: tuple[ModelProxy, str]) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=served[1] + "/v1", api_key="unused", max_retries=0)
    yield client
    client.close()


def test_n_choices_from_the_scripted_backend(oai: openai.OpenAI) -> None:
    resp = oai.chat.completions.create(model="m", messages=USER, n=3)  # type: ignore[arg-type]
    assert [c.index for c in resp.choices] == [0, 1, 2]
    assert {c.message.content for c in resp.choices} == {"say something"}  # deterministic policy
    one = oai.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    assert len(one.choices) == 1


def test_n_choices_streamed(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(model="m", messages=USER, n=2, stream=True)  # type: ignore[arg-type]
    text: dict[int, str] = {}
    for chunk in stream:
        for choice in chunk.choices:
            text[choice.index] = text.get(choice.index, "") + (choice.delta.content or "")
    assert text == {0: "say something", 1: "say something"}


def test_logprobs_the_backend_cannot_give_are_refused_by_name(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="m", messages=USER, logprobs=True)  # type: ignore[arg-type]
    body: Any = err.value.body
    assert err.value.status_code == 400 and body["param"] == "logprobs"
    assert body["type"] == "invalid_request_error" and body["code"] == "unsupported_parameter"


@pytest.mark.parametrize(("extra", "param"), [({"n": 0}, "n"), ({"n": 1000}, "n"),
                                              ({"top_logprobs": 3}, "top_logprobs")])
def test_invalid_chat_parameters(oai: openai.OpenAI, extra: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="m", messages=USER, **extra)  # type: ignore[arg-type]
    assert err.value.body["param"] == param  # type: ignore[index]


def test_empty_messages_is_openais_400(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="m", messages=[])
    body: Any = err.value.body
    assert body["param"] == "messages" and body["code"] == "empty_array"
    assert "empty array" in body["message"]


def test_previous_response_id_resolves_to_the_stored_conversation(
        served: tuple[ModelProxy, str], oai: openai.OpenAI) -> None:
    proxy = served[0]
    proxy.backend = ScriptedBackend("replay", replay=[{"content": "first"}, {"content": "second"}])
    first = oai.responses.create(model="m", input="hello")
    assert first.output_text == "first" and first.previous_response_id is None
    second = oai.responses.create(model="m", input="again", previous_response_id=first.id)
    # the replay policy answers by the number of assistant turns it sees: the first turn was prepended
    assert second.output_text == "second" and second.previous_response_id == first.id
    without = oai.responses.create(model="m", input="again")  # no id: no history, the first answer again
    assert without.output_text == "first"


def test_unknown_or_evicted_previous_response_id_is_400(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai.responses.create(model="m", input="x", previous_response_id="resp_nope")
    body: Any = err.value.body
    assert body["message"] == "Previous response with id 'resp_nope' not found."
    assert body["param"] == "previous_response_id"
    ids = [oai.responses.create(model="m", input=f"q{i}").id for i in range(4)]  # store holds 3
    with pytest.raises(openai.BadRequestError):
        oai.responses.create(model="m", input="x", previous_response_id=ids[0])
    assert oai.responses.create(model="m", input="x", previous_response_id=ids[-1]).output_text == "x"


def test_store_false_is_not_kept(oai: openai.OpenAI) -> None:
    unstored = oai.responses.create(model="m", input="x", store=False)
    with pytest.raises(openai.BadRequestError):
        oai.responses.create(model="m", input="y", previous_response_id=unstored.id)


def test_anthropic_without_max_tokens_or_messages_is_anthropics_400(served: tuple[ModelProxy, str]) -> None:
    client = anthropic.Anthropic(base_url=served[1], api_key="unused", max_retries=0)
    try:
        with pytest.raises(anthropic.BadRequestError) as err:
            client.messages.create(model="m", messages=USER, max_tokens=anthropic.NOT_GIVEN,  # type: ignore[arg-type]
                                   timeout=30)
        body: Any = err.value.body
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"] == "max_tokens: Field required"
        with pytest.raises(anthropic.BadRequestError) as err:
            client.messages.create(model="m", messages=[], max_tokens=10)
        assert "at least one message" in err.value.body["error"]["message"]  # type: ignore[index]
        ok = client.messages.create(model="m", messages=USER, max_tokens=10)  # type: ignore[arg-type]
        assert ok.content[0].text == "say something"  # type: ignore[union-attr]
    finally:
        client.close()


def test_token_capture_request_is_answered_and_recorded_without_tokens(
        served: tuple[ModelProxy, str], oai: openai.OpenAI) -> None:
    """Token capture asks for tokens where a backend has them (vLLM's return_token_ids beside logprobs) and
    records what came, so the scripted backend answers it, and the record says no tokens were captured."""
    proxy, url = served
    client = openai.OpenAI(base_url=url + "/rollouts/r1/v1", api_key="unused", max_retries=0)
    try:
        resp = client.chat.completions.create(model="m", messages=USER, logprobs=True,  # type: ignore[arg-type]
                                              extra_body={"return_token_ids": True})
    finally:
        client.close()
    assert resp.choices[0].message.content == "say something" and resp.choices[0].logprobs is None
    (record,) = proxy.pop_calls("r1")
    assert record.token_capture == "none"
