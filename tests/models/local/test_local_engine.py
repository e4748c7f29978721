"""Continuous batching on a tiny random Llama: rows that join, leave and get cancelled mid-flight must
produce exactly what each sequence produces alone (checked against a plain forward pass)."""

from __future__ import annotations

import time
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="local-model: torch is not installed (the [local] extra)")
transformers = pytest.importorskip("transformers", reason="local-model: transformers is not installed ([local])")

from palaestra.models.local.engine import Engine, Loaded, Params  # noqa: E402
from palaestra.models.local.sampling import Row, choose  # noqa: E402


class _Tok:
    """Just enough tokenizer for stop strings: token t decodes to chr(97 + t % 26)."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(97 + t % 26) for t in ids)


@pytest.fixture(scope="module")
def tiny() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = transformers.LlamaForCausalLM(config).eval()
    engine = Engine(lambda: Loaded(model, _Tok(), frozenset({96}), 256), max_batch=4, gather_s=0.001)
    yield model, engine
    engine.close()


def _forward_logprobs(model: Any, prompt: list[int], gen: list[int]) -> Any:
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + gen])).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)[len(prompt) - 1:-1]
    return lp.gather(-1, torch.tensor(gen)[:, None]).squeeze(-1), logits[len(prompt) - 1:-1].argmax(-1)


def test_rows_joining_and_leaving_match_single_sequences(tiny: Any) -> None:
    model, engine = tiny
    prompts = [[1, 2, 3], [5] * 11, [7, 8], [9, 10, 11, 12, 13], [20] * 7, [30, 31]]
    lengths = [60, 5, 80, 3, 9, 40]
    joins = engine.joins
    futures = []
    for i, (prompt, n) in enumerate(zip(prompts, lengths, strict=True)):
        futures.append(engine.submit(prompt, Params(max_new_tokens=n, temperature=0, ignore_eos=True)))
        if i % 2:
            time.sleep(0.02)  # stagger arrivals so rows join a running batch
    for prompt, n, future in zip(prompts, lengths, futures, strict=True):
        gen = future.result(timeout=60)
        assert len(gen.token_ids) == n and gen.finish_reason == "length"
        expected_lp, argmax = _forward_logprobs(model, prompt, gen.token_ids)
        assert gen.token_ids == argmax.tolist()
        assert torch.allclose(torch.tensor(gen.logprobs), expected_lp, atol=1e-4)
    assert engine.joins > joins  # some rows really joined mid-flight (more than max_batch=4 in total, too)


def test_eos_stop_strings_and_cancellation(tiny: Any) -> None:
    _, engine = tiny
    free = engine.submit([4, 4, 4], Params(max_new_tokens=40, temperature=1.0, seed=3)).result(timeout=60)
    if free.finish_reason == "stop":
        assert free.token_ids[-1] == 96
    stopper = _Tok().decode(free.token_ids[3:5])
    cut = engine.submit([4, 4, 4], Params(max_new_tokens=40, temperature=1.0, seed=3, stop=(stopper,)))
    cut_gen = cut.result(timeout=60)
    assert cut_gen.finish_reason == "stop" and stopper in _Tok().decode(cut_gen.token_ids)
    assert cut_gen.token_ids == free.token_ids[:len(cut_gen.token_ids)]
    doomed = engine.submit([1, 2], Params(max_new_tokens=200, temperature=0, ignore_eos=True))
    doomed.cancel()
    after = engine.submit([1, 2, 3], Params(max_new_tokens=4, temperature=0, ignore_eos=True))
    assert len(after.result(timeout=60).token_ids) == 4


def test_sampling_rows_are_independent_of_their_neighbours() -> None:
    logits = torch.randn(3, 50)

    def rows(seed: int) -> list[Row]:
        return [Row(1.0, 0.9, torch.Generator().manual_seed(seed)), Row(0.7, 1.0, torch.Generator().manual_seed(1)),
                Row(0.0, 1.0, torch.Generator().manual_seed(2), mask=torch.arange(50) % 2 == 1, top_logprobs=3)]

    together = choose(logits, rows(5))
    alone = choose(logits[1:2], rows(5)[1:2])
    assert together[1].token == alone[0].token
    assert together[2].token % 2 == 1 and together[2].token == int(logits[2][1::2].argmax()) * 2 + 1
    raw = torch.log_softmax(logits, dim=-1)
    assert abs(together[2].logprob - float(raw[2, together[2].token])) < 1e-6  # raw, not masked
    assert [t for t, _ in together[2].top] == raw[2].topk(3).indices.tolist()
