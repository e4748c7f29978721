"""Local model throughput (figures, not a test): Palaestra's batching vs plain ``generate``. One JSON line per case.

  python bench/local_model.py                       # concurrency 1, 8, 32; 32 generated tokens each
  python bench/local_model.py --tokens 64 --batches 1,8,32,64 --dtype bfloat16

For each batch size B it measures generated tokens/s of
  generate  — ``model.generate`` on B left-padded prompts at once (greedy, exactly N new tokens)
  backend   — B concurrent ``LocalBackend.chat`` calls (greedy, ``ignore_eos``, ``max_tokens=N``)
  server    — the same B requests over HTTP to the model proxy served by uvicorn on 127.0.0.1
and ``ratio`` = palaestra / generate (the goal is >= 0.9). Every case generates the same token count;
each figure is the best of ``--repeat`` interleaved runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import httpx
import torch

from palaestra.models.local import make_local_backend
from palaestra.models.local.backend import LocalBackend
from palaestra.server.loopback import serve_app
from palaestra.server.model_app import create_model_app
from palaestra.server.model_proxy import ModelProxy

TOPICS = ["the sea", "a red bicycle", "winter", "a lost key", "music", "the moon", "bread", "a library"]


def _messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a short story about {TOPICS[i % len(TOPICS)]} (number {i})."}]


def _request(i: int, tokens: int) -> dict[str, Any]:
    return {"model": "local", "messages": _messages(i), "max_tokens": tokens, "temperature": 0, "ignore_eos": True}


def bench_generate(backend: LocalBackend, batch: int, tokens: int) -> float:
    loaded = backend.engine.loaded.result()
    tok, model = loaded.tokenizer, loaded.model
    tok.padding_side = "left"
    texts = [tok.apply_chat_template(_messages(i), tokenize=False, add_generation_prompt=True) for i in range(batch)]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                             pad_token_id=tok.pad_token_id or 0)
    elapsed = time.perf_counter() - t0
    assert out.shape[1] - enc["input_ids"].shape[1] == tokens
    return batch * tokens / elapsed


async def bench_backend(backend: LocalBackend, batch: int, tokens: int) -> float:
    t0 = time.perf_counter()
    results = await asyncio.gather(*[backend.chat(_request(i, tokens)) for i in range(batch)])
    elapsed = time.perf_counter() - t0
    assert all(r["usage"]["completion_tokens"] == tokens for r in results)
    return batch * tokens / elapsed


async def bench_server(url: str, batch: int, tokens: int) -> float:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        t0 = time.perf_counter()
        responses = await asyncio.gather(*[client.post("/v1/chat/completions", json=_request(i, tokens))
                                           for i in range(batch)])
        elapsed = time.perf_counter() - t0
    assert all(r.status_code == 200 and r.json()["usage"]["completion_tokens"] == tokens for r in responses)
    return batch * tokens / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="local")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs per figure (a shared "
                        "machine is noisy)")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    backend = make_local_backend(args.model, dtype=args.dtype, max_batch=max(batches))
    await backend.ready()
    bench_generate(backend, 1, 4)  # warm both paths before timing
    await bench_backend(backend, 1, 4)
    info = backend.engine.loaded.result().info
    try:
        with serve_app(create_model_app(ModelProxy(backend))) as url:
            for batch in batches:
                gen = direct = http = 0.0
                for _ in range(args.repeat):  # interleaved, so a burst of outside load hits every column alike
                    gen = max(gen, bench_generate(backend, batch, args.tokens))
                    direct = max(direct, await bench_backend(backend, batch, args.tokens))
                    http = max(http, await bench_server(url, batch, args.tokens))
                print(json.dumps({"concurrency": batch, "tokens_each": args.tokens, "dtype": args.dtype,
                                  "threads": info["threads"], "generate_tok_s": round(gen, 1),
                                  "backend_tok_s": round(direct, 1), "server_tok_s": round(http, 1),
                                  "ratio_backend": round(direct / gen, 3), "ratio_server": round(http / gen, 3)}),
                      flush=True)
    finally:
        await backend.aclose()

if __name__ == "__main__":
    asyncio.run(main())
