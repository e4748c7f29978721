"""Every built-in environment passes the conformance suite, in-process and as a local process."""

from __future__ import annotations

import pytest

from palaestra.envs.registry import builtin_names
from palaestra.rollout.conformance import check_env


@pytest.mark.parametrize("placement", ["inprocess", "local"])
@pytest.mark.parametrize("name", builtin_names())
async def test_builtin_env_passes_check(name: str, placement: str) -> None:
    report = await check_env(name, placement)
    failed = [f"{r.name}: {r.detail}" for r in report.results if not r.ok]
    assert not failed, failed
    assert report.tasks >= 20
    assert len(report.results) == 8
