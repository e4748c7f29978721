"""Real servers on 127.0.0.1 for the model tests: uvicorn in a background thread on an OS-chosen port."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from palaestra.server.loopback import serve_app


@pytest.fixture
def live_server() -> Iterator[Callable[[Any], str]]:
    """Factory: ``url = live_server(app)``; every server started is stopped after the test."""
    stack: list[Any] = []

    def start(app: Any) -> str:
        cm = serve_app(app)
        url = cm.__enter__()
        stack.append(cm)
        return url

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)
