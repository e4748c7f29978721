"""Shared by the adapter tests: the fixture directory on sys.path (the adapters import the fixture
environments by module name, as a user's would be), and a real OpenEnv server on 127.0.0.1."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from palaestra.server.loopback import serve_app

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
    pytest.importorskip("openenv", reason="openenv: OpenEnv is not installed (pip install 'palaestra[openenv]')")
    from openenv_counter import app

    with serve_app(app, start_timeout_s=30, lifespan="auto") as url:
        old = os.environ.get("PALAESTRA_TEST_OPENENV_URL")
        os.environ["PALAESTRA_TEST_OPENENV_URL"] = url
        try:
            yield url
        finally:
            if old is None:
                os.environ.pop("PALAESTRA_TEST_OPENENV_URL", None)
            else:
                os.environ["PALAESTRA_TEST_OPENENV_URL"] = old
