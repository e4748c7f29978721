"""Send a run's metrics, config and report to MLflow or Weights & Biases — offline by default.

Both are optional (``pip install 'palaestra[mlflow]'`` / ``'palaestra[wandb]'``) and imported only here,
when asked for. Offline is the default because eval machines often have no route out: MLflow writes a
local file store (``file:``) and W&B runs in offline mode (``wandb sync`` uploads it later).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from palaestra.plugins.registry import registry as plugin_registry
from palaestra.plugins.spec import parse_spec, schema_from
from palaestra.report.index import JournalIndex
from palaestra.report.rundata import METRICS, REPORT, RUN_JSON, ReportError, load_run_info, run_metrics

__all__ = ["EXPORTERS", "export_mlflow", "export_run", "export_wandb", "flat_metrics", "flat_params"]


def _clean(name: str) -> str:
    """Metric names both services accept: letters, digits, ``_ - . /`` and spaces."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]+", "_", name).strip("_ ") or "metric"


def _block(prefix: str, block: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in ("mean_reward", "coverage", "n_tasks", "n_tasks_scored", "n_rollouts_scored", "n_expected"):
        if isinstance(block.get(key), (int, float)):
            out[prefix + key] = float(block[key])
    for key in ("reward_ci95", "pass_at_1_ci95"):
        ci = block.get(key)
        if isinstance(ci, (list, tuple)) and len(ci) == 2:
            out[f"{prefix}{key}_lo"], out[f"{prefix}{key}_hi"] = float(ci[0]), float(ci[1])
    for key in ("pass_at_k", "pass_hat_k", "majority_at_k"):
        for k, v in (block.get(key) or {}).items():
            if isinstance(v, (int, float)):
                out[f"{prefix}{key}/{k}"] = float(v)
    failed = block.get("n_failed") or {}
    out[prefix + "n_failed_total"] = float(sum(failed.values()))  # not "n_failed": a file store nests "/"
    for kind, n in failed.items():
        out[f"{prefix}n_failed/{_clean(kind)}"] = float(n)
    return out


def flat_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Overall numbers, plus ``group/<label>/...`` when the run mixes models, agents or environments."""
    out = _block("", metrics.get("overall") or {})
    groups = metrics.get("groups") or {}
    if len(groups) > 1:
        for label, block in groups.items():
            out.update(_block(f"group/{_clean(label)}/", block))
    return out


def flat_params(manifest: Mapping[str, Any], limit: int = 500) -> dict[str, str]:
    """The resolved config (already redacted in run.json), versions and verifier hashes, as strings."""
    out: dict[str, str] = {}
    for key, value in (manifest.get("config") or {}).items():
        if value is not None:
            out[f"config.{key}"] = str(value)[:limit]
    for key, value in (manifest.get("versions") or {}).items():
        out[f"version.{key}"] = str(value)[:limit]
    for name, env in (manifest.get("envs") or {}).items():
        if isinstance(env, Mapping):
            out[f"env.{name}.verifier_hash"] = str(env.get("verifier_hash"))
            out[f"env.{name}.version"] = str(env.get("version"))
    if manifest.get("run_id"):
        out["run_id"] = str(manifest["run_id"])
    return {_clean(k): v for k, v in out.items()}


def _collect(run_dir: str | Path) -> tuple[Path, dict[str, Any], dict[str, float], list[Path]]:
    info = load_run_info(run_dir)
    index = JournalIndex(info.journal)
    index.advance()
    metrics = run_metrics(info, index.rows, journal_problems=index.problems)
    d = Path(run_dir)
    if not (d / REPORT).is_file():
        from palaestra.report.static import write_report

        write_report(d)
    files = [d / name for name in (REPORT, METRICS, RUN_JSON) if (d / name).is_file()]
    return d, info.manifest, flat_metrics(metrics), files


def _missing(package: str, extra: str) -> ReportError:
    return ReportError(f"the {package} exporter needs the `{package}` package, which is not installed",
                       hint=f"pip install 'palaestra[{extra}]'")


@contextmanager
def _allow_file_store(uri: str) -> Iterator[None]:
    """MLflow 3 refuses new file stores unless told otherwise; a file store is what works offline."""
    from palaestra.settings import scoped_variables

    if not uri.startswith("file:"):
        yield
        return
    with scoped_variables({"MLFLOW_ALLOW_FILE_STORE": "true"}):  # MLflow takes this from the environment only
        yield


def export_mlflow(run_dir: str | Path, *, tracking_uri: str | None = None, experiment: str = "palaestra",
                  run_name: str | None = None) -> str:
    """Log metrics, params and the report to MLflow; returns the MLflow run id.

    ``tracking_uri`` defaults to ``$MLFLOW_TRACKING_URI``, else a file store in ``./mlruns``.
    """
    try:
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise _missing("mlflow", "mlflow") from None
    d, manifest, metrics, files = _collect(run_dir)
    from palaestra.settings import machine

    uri = tracking_uri or machine().mlflow_tracking_uri or (Path.cwd() / "mlruns").as_uri()
    if "://" not in uri and not uri.startswith("file:"):
        uri = Path(uri).resolve().as_uri()  # a plain directory means a file store there
    with _allow_file_store(uri):
        client = MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(experiment)
        exp_id = found.experiment_id if found is not None else client.create_experiment(experiment)
        run = client.create_run(exp_id, run_name=run_name or d.resolve().name,
                                tags={"palaestra.run_dir": str(d.resolve()), "palaestra.kind": "eval"})
        run_id: str = run.info.run_id
        try:
            client.log_batch(run_id, metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                             params=[Param(k, v) for k, v in flat_params(manifest).items()])
            for f in files:
                client.log_artifact(run_id, str(f))
        except Exception:
            client.set_terminated(run_id, status="FAILED")
            raise
        client.set_terminated(run_id)
    return run_id


def export_wandb(run_dir: str | Path, *, project: str = "palaestra", directory: str | Path | None = None,
                 mode: str = "offline", run_name: str | None = None, teardown: bool = True) -> str:
    """Log metrics, config and the report to W&B; returns the local directory of the W&B run.

    ``mode="offline"`` (the default) touches no network; ``wandb sync <dir>`` uploads later. ``teardown``
    waits for wandb's service to finish writing (it also ends other wandb runs of this process: pass False
    when calling from a program that keeps its own run open).
    """
    try:
        import wandb
    except ImportError:
        raise _missing("wandb", "wandb") from None
    if mode not in ("offline", "online", "disabled"):
        raise ReportError(f"unknown W&B mode {mode!r}", hint="use offline (default), online or disabled")
    wb_mode: Literal["offline", "online", "disabled"] = mode  # type: ignore[assignment]
    d, manifest, metrics, files = _collect(run_dir)
    base = Path(directory) if directory is not None else d
    base.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=project, dir=str(base), mode=wb_mode, name=run_name or d.resolve().name,
                     job_type="eval", config=flat_params(manifest), settings=wandb.Settings(silent=True))
    try:
        run.log(metrics)
        run.summary.update(metrics)
        artifact = wandb.Artifact(_clean(f"palaestra-{manifest.get('run_id') or d.resolve().name}").replace(" ", "-"),
                                  type="eval-report")
        for f in files:
            artifact.add_file(str(f))
        run.log_artifact(artifact)
        out = str(Path(run.dir).parent)
    finally:
        run.finish()
        if teardown:  # finish() can return before wandb-core has written the offline file: a CLI that
            wandb.teardown()  # exited right away could lose the run; teardown waits for the writer
    return out


# The built-in exporters are plugins of the ``exporters`` group; installed packages add more (a callable
# ``export(run_dir, **options) -> str``) through the ``palaestra.exporters`` entry-point group.
EXPORTERS = plugin_registry("exporters", declare=False)
EXPORTERS.add_builtins({"mlflow": "palaestra.report.exporters:export_mlflow",
                        "wandb": "palaestra.report.exporters:export_wandb"})


def export_run(spec: str, run_dir: str | Path) -> str:
    """Run the exporter a spec names (``mlflow?experiment=x``, ``wandb?project=p&mode=offline``), its
    options typed by the exporter's own keyword parameters; returns what the exporter returns."""
    parsed = parse_spec(spec, what="exporter")
    plugin = EXPORTERS.get(parsed.kind)
    if plugin is None:
        raise ReportError(f"unknown exporter '{parsed.kind}'", hint=f"known exporters: {', '.join(EXPORTERS.names())}")
    fn = plugin.load()
    if parsed.name:
        raise parsed.error(f"exporter '{parsed.kind}' takes no target after ':'", hint="give options after ?")
    return str(fn(run_dir, **parsed.typed(schema_from(fn, skip=("run_dir",)))))
