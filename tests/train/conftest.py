"""Fixtures for the training tests: real servers on 127.0.0.1 and one shared load of the real local model.

The model fixture follows tests/models/local/conftest.py (skip without the [local] extra or without the
weights) but loads with transformers directly, because the training tests also need the ``nn.Module``
(to recompute logprobs) and serve it through ``TrainableLocalBackend.from_model``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

ENVS = Path(__file__).parent / "envs.py"


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """``app`` on 127.0.0.1 (an OS-chosen port) in a uvicorn thread; yields ``http://127.0.0.1:PORT``."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def policy() -> Iterator[tuple[Any, Any, Any]]:
    """(TrainableLocalBackend, model, tokenizer) over one SmolLM2-135M load per session."""
    for module in ("torch", "transformers", "gguf", "llguidance"):
        pytest.importorskip(module)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from palaestra.core.errors import ConfigError
    from palaestra.models.local.weights import resolve
    from palaestra.train.local_policy import TrainableLocalBackend

    try:
        path = resolve(None, pull=True, notify=lambda _: None).path
    except ConfigError as exc:
        pytest.skip(f"the default local model's weights are unavailable: {exc}")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    backend = TrainableLocalBackend.from_model(model, tokenizer, max_batch=8, default_max_tokens=32)
    backend.start()
    backend.engine.loaded.result(timeout=60)
    yield backend, model, tokenizer
    backend.engine.close()
