"""`palaestra report` and the optional exporters (MLflow file store, W&B offline): skipped when the
package is not installed (they are extras: palaestra[mlflow], palaestra[wandb])."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from palaestra.cli.report_cmds import app
from palaestra.report.exporters import flat_metrics, flat_params


def test_report_command(mixed_run: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(mixed_run)])
    assert result.exit_code == 0, result.output
    assert (mixed_run / "report.html").is_file() and "report.html" in result.output
    bad = CliRunner().invoke(app, ["report", str(mixed_run / "nope")])
    assert bad.exit_code == 2 and "not a directory" in bad.output and "fix:" in bad.output


def test_flatten_for_trackers() -> None:
    metrics = {"overall": {"mean_reward": 0.5, "reward_ci95": [0.4, 0.6], "pass_at_k": {"1": 0.5, "4": 0.9},
                           "n_failed": {"model": 2, "judge?x": 1}, "coverage": 0.9},
               "groups": {"env=a model=x?y": {"mean_reward": 0.1}, "env=b": {"mean_reward": 0.2}}}
    flat = flat_metrics(metrics)
    assert flat["mean_reward"] == 0.5 and flat["reward_ci95_lo"] == 0.4 and flat["pass_at_k/4"] == 0.9
    assert flat["n_failed_total"] == 3 and flat["n_failed/judge_x"] == 1
    assert flat["group/env_a model_x_y/mean_reward"] == 0.1
    params = flat_params({"config": {"model": "m", "seed": None}, "versions": {"python": "3.11"}, "run_id": "r"})
    assert params == {"config.model": "m", "version.python": "3.11", "run_id": "r"}


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow: not installed (extra [mlflow])")
def test_mlflow_file_store(mixed_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from palaestra.report.exporters import export_mlflow

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    store = tmp_path / "mlruns"
    run_id = export_mlflow(mixed_run, tracking_uri=str(store), experiment="tests")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # only to read the store back here
    run = MlflowClient(store.as_uri()).get_run(run_id)
    assert run.data.metrics["coverage"] == pytest.approx(0.875)
    assert run.data.params["run_id"] == "test-run" and run.info.status == "FINISHED"
    artifacts = list((store).rglob("report.html"))
    assert artifacts and artifacts[0].read_text().startswith("<!doctype html>")


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb: not installed (extra [wandb])")
def test_wandb_offline(mixed_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from palaestra.report.exporters import export_wandb

    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "data"))
    where = Path(export_wandb(mixed_run, project="tests", directory=tmp_path / "wb"))
    assert where.name.startswith("offline-run-") and where.is_dir()
    (log,) = where.glob("*.wandb")
    blob = log.read_bytes()
    assert b"mean_reward" in blob and b"coverage" in blob  # the metrics are in the offline run's log
