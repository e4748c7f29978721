"""``env check`` proves the grading contract: failures come back typed. A test-runner environment that turns
a missing test runner or an unreadable reward into a 0 fails the check, naming each probe; the real
``terminal`` passes it, wherever it is placed."""

from __future__ import annotations

from pathlib import Path

import pytest

from palaestra.core.grading import GradingFailure
from palaestra.core.records import Trajectory, Verdict
from palaestra.envs.terminal.env import Terminal as _Terminal
from palaestra.envs.terminal.env import TerminalState
from palaestra.rollout.conformance import CheckReport, check_env

CHECK = "grading failures come back typed"
HERE = Path(__file__).resolve()


class Lenient(_Terminal):
    """Breaks the contract the way the bug did: grading that could not run is scored 0."""

    name = "lenient"
    data_dir = _Terminal.resolved_data_dir()

    async def verify(self, state: TerminalState, trajectory: Trajectory) -> Verdict:
        try:
            return await super().verify(state, trajectory)
        except GradingFailure:
            return Verdict(reward=0.0, passed=False)


def _result(report: CheckReport) -> tuple[bool, str]:
    [found] = [r for r in report.results if r.name == CHECK]
    return found.ok, found.detail


@pytest.mark.parametrize("placement", ["direct", "local"])
async def test_terminal_failures_come_back_typed(placement: str) -> None:
    report = await check_env("terminal", placement, limit=1)
    ok, detail = _result(report)
    assert ok, detail
    assert "unknown session: " in detail
    assert "missing test runner: failed(environment)" in detail and "unparsable reward file: failed(verifier)" in detail
    assert report.ok, [(r.name, r.detail) for r in report.results if not r.ok]


async def test_an_env_that_scores_broken_grading_as_zero_fails_the_check() -> None:
    report = await check_env(f"{HERE}:Lenient", "inprocess", limit=1)
    ok, detail = _result(report)
    assert not ok
    assert "missing test runner: answered a verdict (reward 0), not failed(environment)" in detail
    assert "unparsable reward file: answered a verdict (reward 0), not failed(verifier)" in detail
    others = {r.name: r.ok for r in report.results if r.name != CHECK}
    assert others and all(others.values()), others  # only the contract check catches it
