"""report.html: self-contained, escaped, locked down by CSP, with every chart and the embedded data."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import orjson
import pytest

from palaestra.report import ReportError, write_report
from palaestra.report.charts import bar_chart, heatmap, histogram, reward_color
from palaestra.report.page import embed_json, viewer_script

from .conftest import XSS, rollout, write_run


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="palaestra-data">(.*?)</script>', html, re.S)
    assert m, "embedded data block missing"
    return orjson.loads(m.group(1))


def test_report_of_a_real_run(real_run: Path) -> None:
    path = write_report(real_run)
    assert path == real_run / "report.html"
    html = path.read_text()
    # offline: nothing is loaded from anywhere
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html)
    assert "<link" not in html
    data = _data(html)
    journal_lines = (real_run / "rollouts.jsonl").read_bytes().count(b"\n")
    assert len(data["rows"]) == journal_lines and len(data["details"]) == journal_lines
    assert len(data["tasks"]) == 8
    # the headline comes from metrics.json: the same numbers the terminal printed
    metrics = orjson.loads((real_run / "metrics.json").read_bytes())["overall"]
    assert f"{metrics['mean_reward']:.3f}" in html and "coverage" in html and "pass@1" in html
    for title in ("pass@k and pass^k", "reward distribution", "failed attempts by kind", "task × repeat",
                  "agent time per rollout", "prompt tokens per rollout"):
        assert title in html, title


def test_csp_allows_exactly_the_viewer_script(mixed_run: Path) -> None:
    html = write_report(mixed_run).read_text()
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    digest = base64.b64encode(hashlib.sha256(viewer_script().encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy.replace("&#x27;", "'")
    assert "default-src 'none'" in policy.replace("&#x27;", "'")
    assert f"<script>{viewer_script()}</script>" in html  # the hashed text is exactly what is inlined


def test_untrusted_content_cannot_break_out(mixed_run: Path) -> None:
    html = write_report(mixed_run).read_text()
    assert XSS not in html and "<script>window.__xss" not in html and "onerror=" not in html.replace(
        "\\u003cimg src=x onerror", "")
    details = _data(html)["details"]
    beta1 = next(d for d in details.values() if d["task_id"] == "beta" and d["repeat"] == 1)
    assert beta1["messages"][1]["content"] == XSS  # the JSON escapes read back as the exact text


def test_task_ids_are_escaped_in_charts(tmp_path: Path) -> None:
    evil = '<svg onload="alert(1)">'
    run = write_run(tmp_path / "r", [rollout(evil, 0), rollout(evil, 1, kind="model")])
    html = write_report(run).read_text()
    assert evil not in html and "&lt;svg onload=&quot;alert(1)&quot;&gt;" in html


def test_failures_first_within_the_detail_budget(mixed_run: Path) -> None:
    html = write_report(mixed_run, max_detail_bytes=1).read_text()
    details = _data(html)["details"]
    assert len(details) == 1  # the budget still embeds one rollout ...
    (only,) = details.values()
    assert only["outcome"]["status"] == "failed" or only["verdict"]["reward"] < 1  # ... one that did not pass
    assert "palaestra view" in html


def test_report_without_metrics_recomputes_them(mixed_run: Path) -> None:
    assert not (mixed_run / "metrics.json").exists()
    html = write_report(mixed_run, out=mixed_run / "sub" / "r.html").read_text()
    assert (mixed_run / "sub" / "r.html").is_file() and not (mixed_run / "report.html").exists()
    # 8 slots, 7 scored (gamma r0 was retried into a score; delta r0 never scored) -> 87.5% coverage
    assert "87.5%" in html and "sandbox" in html


def test_stale_metrics_are_not_trusted(mixed_run: Path) -> None:
    (mixed_run / "metrics.json").write_bytes(orjson.dumps({"overall": {"mean_reward": 0.123456}}))
    journal = mixed_run / "rollouts.jsonl"
    journal.write_bytes(journal.read_bytes() + orjson.dumps(rollout("late")) + b"\n")
    import os
    os.utime(journal, (journal.stat().st_mtime + 5, journal.stat().st_mtime + 5))
    assert "0.123" not in write_report(mixed_run).read_text()


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="not a run directory"):
        write_report(tmp_path)
    with pytest.raises(ReportError, match="not a directory"):
        write_report(tmp_path / "missing")


def test_empty_journal_still_makes_a_page(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", [], tasks=["a", "b"])
    html = write_report(run).read_text()
    assert _data(html)["rows"] == [] and "no data" in html


def test_chart_primitives() -> None:
    svg = histogram([0.0, 0.0, 1.0], title="t", edges=[0, 0.5, 1.000001])
    assert svg.count("<rect") == 2 and "0 – 0.5: 2" in svg and "0.5 – 1: 1" in svg
    steps = histogram([2, 3, 3, 5], title="steps")
    assert steps.count("<rect") == 4 and "3: 2" in steps  # one bin per integer
    assert "(log scale)" in histogram([0.001, 0.01, 1.0, 10.0], title="lat", unit="s")
    assert "-0.5" in bar_chart(["a", "b"], [-0.5, 0.25], title="d", value_fmt="{:g}")
    grid = heatmap(["t1"], ["0", "1"], [[1.0, "failed:model"]], title="h")
    assert 'data-task="t1"' in grid and "failed:model" in grid
    assert reward_color(0.0) == "#dc2626" and reward_color(1.0) == "#16a34a"


def test_bin_counts_puts_each_value_where_a_bisect_of_the_edges_does() -> None:
    """``bin_counts`` bisects sorted values once per edge; a value's bin must still be the one a bisect
    of the edges gives it (``[edges[i], edges[i+1])``, clamped to the first and last bins), with values on
    an edge, below the first or past the last, and repeated edges."""
    import random
    from bisect import bisect_right

    from palaestra.report.charts import bin_counts

    rng = random.Random(1)
    for _ in range(3000):
        edges = sorted(rng.choice([0.0, 0.5, 1.0, 1.5, 2.0, rng.uniform(-1, 4)]) for _ in range(rng.randint(2, 12)))
        values = [rng.choice([rng.uniform(-2, 5), 0.5, 1.0, 2.0, edges[0], edges[-1]])
                  for _ in range(rng.randint(0, 30))]
        expected = [0] * (len(edges) - 1)
        for v in values:
            expected[max(0, min(len(expected) - 1, bisect_right(edges, v) - 1))] += 1
        assert bin_counts(values, edges) == expected, (values, edges)


def test_embed_json_is_script_safe() -> None:
    text = embed_json({"a": "</script><!-- & >", "b": "H₂O ≥ …"})
    assert b"<" not in text and b">" not in text and b"&" not in text
    assert orjson.loads(text) == {"a": "</script><!-- & >", "b": "H₂O ≥ …"}
