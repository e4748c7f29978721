from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def counter_spec() -> str:
    return f"{FIXTURES / 'counter_env.py'}:CounterEnv"


# ---- the `fuzz` marker: long variants (minutes each), skipped unless asked for -------------------------
# Skipped rather than deselected through addopts, so a user's own `-m` expression keeps working.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-fuzz", action="store_true", default=False,
                     help="run the long `fuzz` variants (also PALAESTRA_FUZZ=1, or a -m expression naming fuzz)")


def fuzz_enabled(config: pytest.Config) -> bool:
    return (bool(config.getoption("--run-fuzz", default=False))
            or os.environ.get("PALAESTRA_FUZZ", "") not in ("", "0")
            or "fuzz" in (config.getoption("markexpr", default="") or ""))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default run stays short: long variants run only when asked for (see ``fuzz_enabled``)."""
    if fuzz_enabled(config):
        return
    skip = pytest.mark.skip(reason="long `fuzz` variant: run with `pytest -m fuzz`, --run-fuzz or PALAESTRA_FUZZ=1")
    for item in items:
        if item.get_closest_marker("fuzz") is not None:
            item.add_marker(skip)
