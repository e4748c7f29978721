"""The local backend on the real SmolLM2-135M-Instruct: exact token ids, logprobs, seeds, options."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from palaestra.core.errors import ModelError

pytestmark = pytest.mark.timeout(300)

GREEDY_MESSAGES = [{"role": "system", "content": "You are terse."},
                   {"role": "user", "content": "Name three colors."}]


@pytest.fixture(scope="module")
def greedy(local_backend: Any) -> dict[str, Any]:
    """One greedy completion, inspected by several tests."""
    request = {"messages": GREEDY_MESSAGES, "max_tokens": 16, "temperature": 0}
    return asyncio.run(local_backend.chat(request))


def test_first_load_says_where_the_weights_came_from_and_how_fast(local_backend: Any) -> None:
    note = " ".join(local_backend.notes)
    assert "SmolLM2-135M-Instruct" in note and "weights from" in note and "tokens/s" in note


def test_generated_ids_decode_to_the_text(greedy: dict[str, Any], loaded: Any) -> None:
    choice = greedy["choices"][0]
    ids = choice["token_ids"]
    assert ids and all(isinstance(t, int) for t in ids)
    assert loaded.tokenizer.decode(ids, skip_special_tokens=True) == choice["message"]["content"]
    assert len(choice["logprobs"]["content"]) == len(ids) == greedy["usage"]["completion_tokens"]
    if choice["finish_reason"] == "stop":
        assert ids[-1] in loaded.eos_ids  # the EOS the model sampled is part of what it produced
    else:
        assert choice["finish_reason"] == "length" and len(ids) == 16
    assert greedy["usage"]["prompt_tokens"] == len(greedy["prompt_token_ids"])


def test_prompt_ids_are_the_tokenized_chat_template(greedy: dict[str, Any], loaded: Any) -> None:
    expected = loaded.tokenizer.apply_chat_template(GREEDY_MESSAGES, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert greedy["prompt_token_ids"] == list(expected)
    text = loaded.tokenizer.decode(greedy["prompt_token_ids"])
    assert text.endswith("<|im_start|>assistant\n") and "Name three colors." in text


def test_logprobs_match_a_forward_pass(greedy: dict[str, Any], loaded: Any) -> None:
    import torch

    prompt, gen = greedy["prompt_token_ids"], greedy["choices"][0]["token_ids"]
    recorded = [c["logprob"] for c in greedy["choices"][0]["logprobs"]["content"]]
    with torch.inference_mode():
        logits = loaded.model(torch.tensor([prompt + gen])).logits[0].float()
    expected = torch.log_softmax(logits, dim=-1)[len(prompt) - 1:-1].gather(-1, torch.tensor(gen)[:, None])
    assert torch.allclose(torch.tensor(recorded), expected.squeeze(-1), atol=1e-3)
    # greedy: every token is the forward pass's argmax
    assert logits[len(prompt) - 1:-1].argmax(-1).tolist() == gen


async def test_seeded_sampling_is_reproducible_alone_and_batched(local_backend: Any) -> None:
    def req(content: str, seed: int, tokens: int = 10) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": content}], "max_tokens": tokens,
                "temperature": 1.0, "top_p": 0.95, "seed": seed}

    alone = await local_backend.chat(req("Tell me about owls.", 1234))
    batched = await asyncio.gather(
        local_backend.chat(req("Write a poem about a long winding river in the mountains.", 1, 14)),
        local_backend.chat(req("Tell me about owls.", 1234)),
        local_backend.chat(req("Hi", 99, 4)),
        local_backend.chat(req("Tell me about owls.", 4321)),
    )
    assert batched[1]["choices"][0]["token_ids"] == alone["choices"][0]["token_ids"]
    assert batched[3]["choices"][0]["token_ids"] != alone["choices"][0]["token_ids"]


async def test_n_choices_differ_and_stop_sequences_cut_the_text(local_backend: Any, greedy: dict[str, Any]
                                                                ) -> None:
    many = await local_backend.chat({"messages": [{"role": "user", "content": "Say a word."}], "n": 3,
                                     "max_tokens": 6, "temperature": 1.0, "seed": 7})
    assert [c["index"] for c in many["choices"]] == [0, 1, 2]
    assert len({tuple(c["token_ids"]) for c in many["choices"]}) > 1
    assert many["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in many["choices"])

    text = greedy["choices"][0]["message"]["content"]
    words = text.split()
    assert len(words) >= 3, text
    stop = words[2]
    cut = await local_backend.chat({"messages": GREEDY_MESSAGES, "max_tokens": 16, "temperature": 0,
                                    "stop": [stop]})
    choice = cut["choices"][0]
    assert choice["message"]["content"] == text[:text.index(stop)]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    assert len(choice["token_ids"]) < len(greedy["choices"][0]["token_ids"])


async def test_bad_requests_are_model_errors_with_status_400(local_backend: Any, loaded: Any) -> None:
    bad = [
        {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"},
        {"messages": [{"role": "user", "content": "x"}], "temperature": 7},
        {"messages": []},
        {"messages": [{"role": "user", "content": "word " * (loaded.max_positions + 10)}]},
    ]
    for request in bad:
        with pytest.raises(ModelError) as info:
            await local_backend.chat(request)
        assert info.value.status == 400, request


def test_tool_turns_render_in_the_format_the_parser_reads(loaded: Any) -> None:
    from palaestra.models.local import prompt

    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
    messages = [{"role": "user", "content": "Add 2 and 3."},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "5"}]
    text, ids = prompt.render(loaded.tokenizer, messages, tools)
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>' in text
    assert "<tool_response>\n5\n</tool_response>" in text and '"name": "add"' in text.split("<tools>\n")[1]
    assert loaded.tokenizer.decode(ids) == text
