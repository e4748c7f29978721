"""What each run of a comparison scored and spent: a cascade through the real CLI, against its cheap and
strong models alone, and hand-made journals for unpriced runs and runs without (or with stale) metrics."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from palaestra.cli.main import app
from palaestra.report.compare import run_spend, runs_spend
from palaestra.report.compare_view import comparison_html, fmt_cost, fmt_tokens, spend_html, spend_table

from .conftest import rollout, write_run

RUN_YAML = """\
env: mcqa
repeats: 1
models:
  cheap: "scripted:oracle?accuracy=0.4&seed=1"
  strong: "scripted:oracle"
model_prices:
  cheap: 0.1
  strong: 10.0
"""
STRATEGIES = {"cheap": "cheap", "strong": "strong", "cascade": "router:cascade?to=cheap,strong"}


def _invoke(args: list[str]) -> str:
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})  # wide enough that no number wraps
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def strategy_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """cheap, strong and cascade runs of the bundled mcqa tasks, made by `palaestra eval run --config`."""
    root = tmp_path_factory.mktemp("strategies")
    (root / "run.yaml").write_text(RUN_YAML)
    runs = {}
    for name, model in STRATEGIES.items():
        runs[name] = root / name
        _invoke(["eval", "run", "--config", str(root / "run.yaml"), "--model", model, "--out", str(runs[name]),
                 "--quiet"])
        assert (runs[name] / "metrics.json").is_file()
    return runs


def test_cascade_spend_through_the_cli(strategy_runs: dict[str, Path], tmp_path: Path) -> None:
    dirs = [str(strategy_runs[n]) for n in ("cheap", "strong", "cascade")]
    data = json.loads(_invoke(["eval", "compare", *dirs, "--json", "--no-html"]))
    assert [c["candidate"] for c in data["comparisons"]] == ["strong", "cascade"]
    runs = {r["name"]: r for r in data["runs"]}
    assert list(runs) == ["cheap", "strong", "cascade"]
    cheap, strong, cascade = runs["cheap"], runs["strong"], runs["cascade"]
    assert cascade["strategy"] == "router:cascade?to=cheap,strong" and cheap["strategy"] == "cheap"

    # the acceptance: better than the cheap model alone, fewer expensive calls than the strong model alone
    assert cascade["mean_reward"] > cheap["mean_reward"]
    assert cascade["pass_rate"] > cheap["pass_rate"]
    assert 0 < cascade["models"]["strong"]["calls"] < strong["models"]["strong"]["calls"]
    assert cascade["cost"] < strong["cost"]
    assert cascade["models"]["cheap"]["calls"] == cheap["calls"] == 25  # every task asks the cheap model first
    assert cascade["calls"] == 25 + cascade["models"]["strong"]["calls"]

    # the numbers are the runs' own (metrics.json), and add up
    for name, r in runs.items():
        metrics = orjson.loads((strategy_runs[name] / "metrics.json").read_bytes())
        assert r["source"] == "metrics.json"
        assert r["mean_reward"] == metrics["overall"]["mean_reward"]
        assert r["n_rollouts_scored"] == metrics["overall"]["n_rollouts_scored"] == 25
        for model, usage in metrics["model_usage"].items():
            assert r["models"][model]["calls"] == usage["calls"]
            assert r["models"][model]["cost"] == pytest.approx(usage["cost"])
        assert r["tokens"] == r["prompt_tokens"] + r["completion_tokens"] > 0
        assert r["cost"] == pytest.approx(sum(u["cost"] for u in metrics["model_usage"].values()))
        assert r["unpriced"] == []

    # the table shows the same numbers
    page = tmp_path / "compare.html"
    text = _invoke(["eval", "compare", *dirs, "--html", str(page)])
    assert "accuracy, tokens and cost per run" in text and "router:cascade?to=cheap,strong" in text
    lines = {r["name"]: next(line for line in text.splitlines() if line.startswith(f"│ {r['name']} "))
             for r in data["runs"]}
    for name, r in runs.items():
        for cell in (f"{r['mean_reward']:.3f}", f"{r['pass_rate']:.3f}", str(r["calls"]), fmt_tokens(r["tokens"]),
                     fmt_cost(r["cost"])):
            assert f" {cell} " in lines[name], (name, cell, lines[name])
    strong_rows = [line for line in text.splitlines() if "↳ strong" in line]
    assert len(strong_rows) == 2  # under the strong run and under the cascade
    for row, r in zip(strong_rows, (strong, cascade), strict=True):
        m = r["models"]["strong"]
        assert all(f" {cell} " in row for cell in (str(m["calls"]), fmt_tokens(m["tokens"]), fmt_cost(m["cost"])))
    html = page.read_text()
    assert "accuracy, tokens and cost per run" in html and fmt_cost(cascade["cost"]) in html
    assert f"{fmt_tokens(cascade['prompt_tokens'])} + {fmt_tokens(cascade['completion_tokens'])}" in html


def _call(model: str, prompt: int, completion: int) -> dict[str, Any]:
    return {"api": "chat", "status": 200, "latency_s": 0.1, "routed_to": model,
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def _set_config(run_dir: Path, **config: Any) -> None:
    manifest = orjson.loads((run_dir / "run.json").read_bytes())
    manifest["config"] = {**manifest["config"], **config}
    (run_dir / "run.json").write_bytes(orjson.dumps(manifest))


def _journal_run(run_dir: Path) -> Path:
    """Two tasks × two repeats, no metrics.json: 'a' answers every call, 'b' is asked after a miss."""
    records = [rollout("t0", 0, model_calls=[_call("a", 100, 10)]),
               rollout("t0", 1, reward=0.0, model_calls=[_call("a", 100, 10), _call("b", 200, 20)]),
               rollout("t1", 0, model_calls=[_call("a", 100, 10)]),
               rollout("t1", 1, kind="model", model_calls=[_call("a", 50, 0)]),  # failed, but paid for
               rollout("t1", 1, attempt=1, model_calls=[_call("a", 100, 10)])]
    return write_run(run_dir, records)


def test_unpriced_run_without_metrics_is_recomputed_from_the_journal(tmp_path: Path) -> None:
    run = _journal_run(tmp_path / "unpriced")
    spend = run_spend(run)
    assert spend.source == "journal" and spend.strategy == "m"
    assert spend.mean_reward == pytest.approx(0.75) and spend.pass_rate == pytest.approx(0.75)
    assert spend.n_rollouts_scored == 4 and spend.coverage == pytest.approx(1.0)
    assert {k: (m.calls, m.prompt_tokens, m.completion_tokens) for k, m in spend.models.items()} == {
        "a": (5, 450, 40), "b": (1, 200, 20)}
    assert spend.calls == 6 and spend.tokens == 710
    assert spend.cost is None and spend.unpriced == ["a", "b"] and spend.models["a"].cost is None
    table = spend_table([spend])
    assert table.row_count == 3
    assert list(table.columns[-1].cells) == ["–", "–", "–"]
    assert "no price for a, b" in str(table.caption) and "recomputed from the journal" in str(table.caption)
    assert spend.to_dict()["cost"] is None


def test_journal_recompute_prices_with_the_run_config_and_partial_prices_leave_the_total_unknown(
        tmp_path: Path) -> None:
    priced = _journal_run(tmp_path / "priced")
    _set_config(priced, model_prices={"a": 2.0, "b": 30.0})
    spend = run_spend(priced)
    assert spend.models["a"].cost == pytest.approx(490 * 2.0 / 1e6)
    assert spend.models["b"].cost == pytest.approx(220 * 30.0 / 1e6)
    assert spend.cost == pytest.approx((490 * 2.0 + 220 * 30.0) / 1e6) and spend.unpriced == []

    partial = _journal_run(tmp_path / "partial")
    _set_config(partial, model_prices={"b": 30.0})
    spend = run_spend(partial)
    assert spend.models["b"].cost == pytest.approx(220 * 30.0 / 1e6)
    assert spend.cost is None and spend.unpriced == ["a"]  # a partial sum would understate the spend
    html = spend_html([spend])
    assert "no price for a in model_prices" in html and fmt_cost(spend.models["b"].cost) in html


def test_fresh_metrics_are_read_and_stale_ones_recomputed(tmp_path: Path) -> None:
    run = _journal_run(tmp_path / "run")
    metrics = {"overall": {"mean_reward": 0.5, "pass_at_k": {"1": 0.25}, "n_rollouts_scored": 9,
                           "coverage": 0.9},
               "model_usage": {"x": {"calls": 3, "prompt_tokens": 30, "completion_tokens": 3, "cost": 0.5}}}
    (run / "metrics.json").write_bytes(orjson.dumps(metrics))
    spend = run_spend(run)
    assert spend.source == "metrics.json" and spend.mean_reward == 0.5 and spend.pass_rate == 0.25
    assert list(spend.models) == ["x"] and spend.cost == 0.5 and spend.n_rollouts_scored == 9

    old = (run / "rollouts.jsonl").stat().st_mtime - 60  # the journal grew after the metrics were written
    os.utime(run / "metrics.json", (old, old))
    spend = run_spend(run)
    assert spend.source == "journal" and list(spend.models) == ["a", "b"] and spend.n_rollouts_scored == 4


def test_spend_names_match_the_comparison_and_text_is_escaped(tmp_path: Path) -> None:
    one = _journal_run(tmp_path / "x" / "run")
    two = _journal_run(tmp_path / "y" / "run")
    _set_config(two, model="<b>router</b>")
    spends = runs_spend([one, two])
    assert [s.name for s in spends] == [str(one), str(two)]  # same directory name: the paths tell them apart
    _set_config(one, entries=[{"name": "mcqa-cascade", "model": "router:cascade?to=a,b"}, {"name": "work"}])
    assert run_spend(one).strategy == "entries: mcqa-cascade, work"  # the run's --model is only a default
    html = comparison_html([], spends)
    assert "<b>router</b>" not in html and "&lt;b&gt;router&lt;/b&gt;" in html and "<script" not in html
