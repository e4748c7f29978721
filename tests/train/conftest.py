"""Fixtures for the training tests: real servers on 127.0.0.1 and one shared load of the real local model.

The model fixture follows tests/models/local/conftest.py (skip without the [local] extra or without the
weights) but loads with transformers directly, because the training tests also need the ``nn.Module``
(to recompute logprobs) and serve it through ``TrainableLocalBackend.from_model``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ENVS = Path(__file__).parent / "envs.py"


@pytest.fixture(scope="session")
def policy() -> Iterator[tuple[Any, Any, Any]]:
    """(TrainableLocalBackend, model, tokenizer) over one SmolLM2-135M load per session."""
    for module in ("torch", "transformers", "gguf", "llguidance"):
        pytest.importorskip(module, reason=f"local-model: {module} is not installed (the [local] extra)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from palaestra.core.errors import ConfigError
    from palaestra.models.local.weights import resolve
    from palaestra.train.local_policy import TrainableLocalBackend

    try:
        path = resolve(None, pull=True, notify=lambda _: None).path
    except ConfigError as exc:
        pytest.skip(f"local-model: the default local model's weights are unavailable: {exc}")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    backend = TrainableLocalBackend.from_model(model, tokenizer, max_batch=8, default_max_tokens=32)
    backend.start()
    backend.engine.loaded.result(timeout=60)
    yield backend, model, tokenizer
    backend.engine.close()
