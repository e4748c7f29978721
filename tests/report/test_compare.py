"""Paired comparison: the statistics against hand-computed values, and whole runs end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from palaestra.cli.report_cmds import app
from palaestra.report.compare import compare_runs, holm, paired_bootstrap_ci, sign_flip_p
from palaestra.report.compare_view import comparison_html, comparison_table
from palaestra.report.rundata import ReportError

from .conftest import rollout, write_run


def test_sign_flip_exact_values() -> None:
    # all 5 differences positive: only the all-plus and all-minus patterns are as extreme -> 2/32
    assert sign_flip_p([0.1, 0.2, 0.3, 0.4, 0.5]) == pytest.approx(2 / 32)
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0
    assert sign_flip_p([]) is None
    # symmetric differences: every pattern is at least as extreme as a mean of 0
    assert sign_flip_p([1.0, -1.0]) == 1.0


def test_sign_flip_monte_carlo_agrees_with_theory() -> None:
    rng = np.random.default_rng(3)
    null = rng.normal(0, 1, size=40)  # no effect: p should not be small
    shifted = null + 1.0              # a clear effect
    assert sign_flip_p(null, seed=1) > 0.05
    p = sign_flip_p(shifted, seed=1)
    assert p is not None and p < 0.001 and p > 0  # Monte Carlo p never reports 0


def test_bootstrap_interval_and_holm() -> None:
    diffs = [0.2, 0.25, 0.3, 0.15, 0.22, 0.28]
    lo, hi = paired_bootstrap_ci(diffs)
    assert lo < np.mean(diffs) < hi and lo > 0.1 and hi < 0.31
    assert paired_bootstrap_ci([0.5]) is None
    assert holm([0.01, 0.04, None, 0.03]) == pytest.approx([0.03, 0.06, None, 0.06])


def _runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    tasks = [f"t{i}" for i in range(10)]
    base = write_run(tmp_path / "base", [rollout(t, r, reward=0.0 if i < 6 else 1.0)
                                         for i, t in enumerate(tasks) for r in range(2)])
    # better: 4 more tasks solved; one task only here; one failure (excluded, never a zero)
    better_records = [rollout(t, r, reward=0.0 if i < 2 else 1.0) for i, t in enumerate(tasks) for r in range(2)]
    better_records += [rollout("extra", 0), rollout("t0", 2, kind="model")]
    better = write_run(tmp_path / "better", better_records)
    same = write_run(tmp_path / "same", [rollout(t, r, reward=0.0 if i < 6 else 1.0)
                                         for i, t in enumerate(tasks) for r in range(2)])
    return base, better, same


def test_compare_runs_end_to_end(tmp_path: Path) -> None:
    base, better, same = _runs(tmp_path)
    c_better, c_same = compare_runs([base, better, same], n_boot=2000)
    assert c_better.candidate == "better" and len(c_better.tasks) == 10
    assert c_better.mean_a == pytest.approx(0.4) and c_better.mean_b == pytest.approx(0.8)
    assert c_better.mean_diff == pytest.approx(0.4) and (c_better.wins, c_better.losses, c_better.ties) == (4, 0, 6)
    assert c_better.p_value == pytest.approx(2 / 16)  # 4 non-zero differences, all positive: exact test
    assert c_better.only_candidate == ["extra"] and c_better.only_baseline == []
    assert c_same.mean_diff == 0 and c_same.p_value == 1.0
    assert c_better.p_holm == pytest.approx(min(1.0, 2 * c_better.p_value))
    assert c_better.ci95 is not None and c_better.ci95[0] >= 0
    html = comparison_html([c_better, c_same])
    assert "better vs base" in html and "<script" not in html and "t5" in html
    assert comparison_table([c_better]).row_count == 1


def test_compare_pass_metric_and_errors(tmp_path: Path) -> None:
    base, better, _ = _runs(tmp_path)
    (c,) = compare_runs([base, better], metric="pass")
    assert c.mean_diff == pytest.approx(0.4)
    with pytest.raises(ReportError, match="at least two"):
        compare_runs([base])
    with pytest.raises(ReportError, match="unknown comparison metric"):
        compare_runs([base, better], metric="speed")
    other = write_run(tmp_path / "other", [rollout("zzz", 0)])
    with pytest.raises(ReportError, match="no task was scored in both"):
        compare_runs([base, other])


def test_compare_cli_writes_table_json_and_html(tmp_path: Path) -> None:
    base, better, _ = _runs(tmp_path)
    page = tmp_path / "cmp.html"
    result = CliRunner().invoke(app, ["compare", str(base), str(better), "--html", str(page), "--n-boot", "500"])
    assert result.exit_code == 0, result.output
    assert "better" in result.output and "+0.400" in result.output and page.is_file()
    result = CliRunner().invoke(app, ["compare", str(base), str(better), "--json", "--no-html"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["comparisons"][0]["n_paired"] == 10 and data["comparisons"][0]["mean_diff"] == pytest.approx(0.4)
    assert [r["name"] for r in data["runs"]] == ["base", "better"]
    assert data["runs"][1]["mean_reward"] == pytest.approx(17 / 21)  # rollout-weighted, the extra task too
    bad = CliRunner().invoke(app, ["compare", str(base)])
    assert bad.exit_code == 2 and "at least two" in bad.output
