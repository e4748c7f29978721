"""The run directory: ``run.json`` (resolved config, versions, verifier hashes; secrets redacted),
``tasks.jsonl`` (the snapshot of the tasks), ``rollouts.jsonl`` (the journal) and ``metrics.json``."""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from palaestra.core.records import SCHEMA_VERSION
from palaestra.core.secrets import redact

__all__ = ["redact"]

RUN_JSON = "run.json"
TASKS = "tasks.jsonl"
JOURNAL = "rollouts.jsonl"
METRICS = "metrics.json"

def default_out(env: str | None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{env or 'mixed'}"


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def versions() -> dict[str, str]:
    from palaestra import __version__

    return {"palaestra": __version__, "python": sys.version.split()[0], "platform": platform.platform()}


def run_manifest(run_id: str, config: dict[str, Any], envs: dict[str, dict[str, str]], n_tasks: int,
                 repeats: int) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": redact(config),
        "versions": versions(),
        "seed": config.get("seed"),
        "envs": envs,
        "tasks": n_tasks,
        "repeats": repeats,
    }


def read_manifest(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((run_dir / RUN_JSON).read_bytes())
    return data
