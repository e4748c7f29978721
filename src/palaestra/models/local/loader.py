"""Loading the local model (in the engine thread) and saying where it came from and how fast it runs.

fp32 is the default on purpose: CPU bf16 kernels round differently at different batch sizes, so a seeded
request could sample differently depending on what else is in flight, and recorded logprobs drift by
~0.2 from a single-sequence forward pass. fp32 keeps both exact to ~1e-5; ``dtype=bfloat16`` trades that
for roughly 2-4x throughput on CPUs with bf16 support.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from palaestra.core.errors import ConfigError
from palaestra.models.local import weights
from palaestra.models.local.batch import KVBatch
from palaestra.models.local.engine import Loaded

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class LoadOptions:
    spec: str | None = None
    dtype: str = "float32"
    threads: int | None = None
    pull: bool = True
    notify: weights.Notify | None = None


def eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """Every id that ends a turn: the config's and generation config's EOS, the tokenizer's, and ChatML's."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None)
        ids.update([value] if isinstance(value, int) else list(value or []))
    if isinstance(tokenizer.eos_token_id, int):
        ids.add(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    for token in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        if token in vocab:
            ids.add(vocab[token])
    return frozenset(ids)


def _speed(model: Any, tokenizer: Any, steps: int = 8) -> float:
    """Tokens per second for one sequence, from a short greedy warm-up (which also warms the kernels)."""
    batch = KVBatch(model)
    ids = tokenizer("Count from one to ten:", add_special_tokens=False)["input_ids"]
    logits, cache, mask = batch.prefill([list(ids)])
    batch.join(cache, mask, [len(ids)])
    token = int(logits[0].argmax())
    t0 = time.perf_counter()
    for _ in range(steps):
        token = int(batch.step([token])[0].argmax())
    return steps / max(time.perf_counter() - t0, 1e-9)


def load(options: LoadOptions) -> Loaded:
    """Resolve the weights (pulling/converting if needed), load them, warm up, and report."""
    notify = options.notify or weights._stderr
    if options.dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {options.dtype!r} for the local model", hint=f"use one of {DTYPES}")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    threads = options.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    found = weights.resolve(options.spec, pull=options.pull, notify=notify)
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(found.path), **weights.OFFLINE)
    model = AutoModelForCausalLM.from_pretrained(str(found.path), dtype=getattr(torch, options.dtype),
                                                 **weights.OFFLINE)
    model.eval()
    load_s = time.perf_counter() - t0
    with torch.inference_mode():
        speed = _speed(model, tokenizer)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    max_positions = int(getattr(config, "max_position_embeddings", 0) or 4096)
    info = {"name": found.name, "path": str(found.path), "origin": found.origin, "dtype": options.dtype,
            "threads": threads, "load_s": round(load_s, 2), "tokens_per_s_1": round(speed, 1),
            "vocab_size": int(getattr(config, "vocab_size", len(tokenizer)))}
    notify(f"local model {found.name}: weights from {found.origin}; loaded in {load_s:.1f} s "
           f"({options.dtype}, {threads} CPU threads); ~{speed:.0f} generated tokens/s for one sequence, "
           "more in total when requests run concurrently (they are batched)")
    return Loaded(model=model, tokenizer=tokenizer, eos_ids=eos_ids(model, tokenizer),
                  max_positions=max_positions, info=info)
