"""Fuzz suite plumbing: the shared strategies module on ``sys.path`` (the suite imports with
``--import-mode=importlib``) and hypothesis' cache directory. The ``fuzz`` marker of the long variants is
registered in pyproject.toml and gated in tests/conftest.py (deselected unless ``-m fuzz``, ``--run-fuzz``
or ``PALAESTRA_FUZZ=1`` asks for them)."""

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
