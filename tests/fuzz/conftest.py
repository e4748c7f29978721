"""Fuzz suite plumbing: the ``fuzz`` marker (long variants, skipped unless ``-m fuzz`` selects them) and
the shared strategies module on ``sys.path`` (the suite imports with ``--import-mode=importlib``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fuzz: long property-based fuzzing variant (minutes); run with `pytest -m fuzz tests/fuzz`"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default run stays short: long variants run only when the marker expression names them."""
    if "fuzz" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="long fuzz variant: run with `pytest -m fuzz tests/fuzz`")
    for item in items:
        if item.get_closest_marker("fuzz") is not None:
            item.add_marker(skip)
