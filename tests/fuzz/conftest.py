"""Fuzz suite plumbing: the ``fuzz`` marker (long variants, skipped unless ``-m fuzz`` selects them) and
the shared strategies module on ``sys.path`` (the suite imports with ``--import-mode=importlib``)."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

sys.path.insert(0, str(Path(__file__).parent))

# Hypothesis keeps caches (constants, unicode tables) in ./.hypothesis even without an example database;
# keep them out of the working tree and remove them when the session ends.
_HYPOTHESIS_HOME = Path(tempfile.mkdtemp(prefix="palaestra-hypothesis-"))
set_hypothesis_home_dir(_HYPOTHESIS_HOME)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_HYPOTHESIS_HOME, ignore_errors=True)


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
