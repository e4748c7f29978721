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
def policy(local_model_path: Path) -> Iterator[tuple[Any, Any, Any]]:
    """(TrainableLocalBackend, model, tokenizer) over one SmolLM2-135M load per session."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from palaestra.train.local_policy import TrainableLocalBackend

    path = local_model_path
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    backend = TrainableLocalBackend.from_model(model, tokenizer, max_batch=8, default_max_tokens=32)
    backend.start()
    backend.engine.loaded.result(timeout=60)
    yield backend, model, tokenizer
    backend.engine.close()
