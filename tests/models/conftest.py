"""Real servers on 127.0.0.1 for the model tests: uvicorn in a background thread on an OS-chosen port."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run ``app`` with uvicorn on 127.0.0.1:0 and yield its base URL (``http://127.0.0.1:PORT``)."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
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


@pytest.fixture
def live_server() -> Iterator[Callable[[Any], str]]:
    """Factory: ``url = live_server(app)``; every server started is stopped after the test."""
    stack: list[Any] = []

    def start(app: Any) -> str:
        cm = serve(app)
        url = cm.__enter__()
        stack.append(cm)
        return url

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)
