"""Shared by the adapter tests: the fixture directory on sys.path (the adapters import the fixture
environments by module name, as a user's would be), and a real OpenEnv server on 127.0.0.1."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def adapters_dir() -> Iterator[Path]:
    sys.path.insert(0, str(HERE))
    try:
        yield HERE
    finally:
        sys.path.remove(str(HERE))


@pytest.fixture(scope="module")
def openenv_url(adapters_dir: Path) -> Iterator[str]:
    """The fixture OpenEnv app (OpenEnv's own create_app) served by uvicorn in a thread on 127.0.0.1:0;
    its URL is also in PALAESTRA_TEST_OPENENV_URL, where the RemoteCounter adapter looks."""
    pytest.importorskip("openenv", reason="OpenEnv is not installed (pip install 'palaestra[openenv]')")
    import uvicorn
    from openenv_counter import app

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("OpenEnv test server did not start")
        time.sleep(0.01)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    old = os.environ.get("PALAESTRA_TEST_OPENENV_URL")
    os.environ["PALAESTRA_TEST_OPENENV_URL"] = url
    try:
        yield url
    finally:
        if old is None:
            os.environ.pop("PALAESTRA_TEST_OPENENV_URL", None)
        else:
            os.environ["PALAESTRA_TEST_OPENENV_URL"] = old
        server.should_exit = True
        thread.join(timeout=10)
