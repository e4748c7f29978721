"""What a report needs from a run directory besides the journal: the manifest, the expected slots and
the metrics — read leniently, because a report of a half-written or damaged run is when one is wanted most.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from palaestra.core.errors import PalaestraError
from palaestra.metrics.rows import Row
from palaestra.metrics.summary import compute_metrics

__all__ = ["ReportError", "RunInfo", "load_run_info", "run_metrics", "stored_metrics"]

RUN_JSON, TASKS, JOURNAL, METRICS, REPORT = "run.json", "tasks.jsonl", "rollouts.jsonl", "metrics.json", "report.html"


class ReportError(PalaestraError):
    kind = "report"


@dataclass
class RunInfo:
    run_dir: Path
    manifest: dict[str, Any]
    expected: dict[tuple[str, str], int] | None
    problems: list[str]

    @property
    def journal(self) -> Path:
        return self.run_dir / JOURNAL

    @property
    def title(self) -> str:
        return f"Palaestra · {self.run_dir.resolve().name}"


def _expected(run_dir: Path, repeats: int, problems: list[str]) -> dict[tuple[str, str], int] | None:
    """(env, task id) -> repeats asked for, from the task snapshot; None when there is no snapshot."""
    path = run_dir / TASKS
    if not path.is_file():
        return None
    out: dict[tuple[str, str], int] = {}
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
                out[(str(row.get("env", "")), str(row["id"]))] = repeats
            except (orjson.JSONDecodeError, KeyError, AttributeError, TypeError):
                problems.append(f"{path}:{lineno}: not a task row; coverage leaves it out")
    return out


def load_run_info(run_dir: str | Path, *, expected: dict[tuple[str, str], int] | None = None) -> RunInfo:
    """The run's manifest and expected slots; raises ReportError when ``run_dir`` holds no journal.

    ``expected``: the slots as the caller knows them (the end of a run: the tasks it ran, which it has
    just written to tasks.jsonl), so the snapshot is not read back and parsed line by line."""
    d = Path(run_dir)
    if not d.is_dir():
        raise ReportError(f"{d} is not a directory", hint="give the --out directory of a `palaestra eval run`")
    if not (d / JOURNAL).is_file() and not (d / RUN_JSON).is_file():
        raise ReportError(f"{d} is not a run directory (no {JOURNAL} or {RUN_JSON})",
                          hint="give the --out directory of a `palaestra eval run`")
    problems: list[str] = []
    manifest: dict[str, Any] = {}
    if (d / RUN_JSON).is_file():
        try:
            loaded = orjson.loads((d / RUN_JSON).read_bytes())
            manifest = loaded if isinstance(loaded, dict) else {}
        except orjson.JSONDecodeError as exc:
            problems.append(f"{d / RUN_JSON}: invalid JSON ({exc}); run details left out")
    repeats = manifest.get("repeats")
    if expected is None:
        expected = _expected(d, int(repeats), problems) if isinstance(repeats, int) and repeats > 0 else None
    return RunInfo(d, manifest, expected, problems)


def stored_metrics(info: RunInfo) -> dict[str, Any] | None:
    """``metrics.json`` when it is at least as new as the journal, else None: a run in progress (or one
    killed before it wrote its metrics) has a journal newer than its metrics, whose numbers are then stale."""
    path = info.run_dir / METRICS
    try:
        if path.is_file() and (not info.journal.exists()
                               or path.stat().st_mtime >= info.journal.stat().st_mtime):
            loaded = orjson.loads(path.read_bytes())
            return loaded if isinstance(loaded, dict) and "overall" in loaded else None
    except (OSError, orjson.JSONDecodeError):
        pass
    return None


def run_metrics(info: RunInfo, rows: list[Row], *, journal_problems: list[str] | None = None,
                metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """``metrics.json`` when it is at least as new as the journal (the numbers the run printed), else
    metrics recomputed from the rows (a run in progress, or one killed before it wrote its metrics).
    ``metrics``: the run's metrics as the caller just wrote them (the end of a run), not read back."""
    if metrics is None:
        metrics = stored_metrics(info)
    if metrics is None:
        metrics = compute_metrics(rows, info.expected)
        if journal_problems:
            metrics["journal_problems"] = list(journal_problems)
    if info.problems:
        metrics = {**metrics, "journal_problems": list(metrics.get("journal_problems") or []) + info.problems}
    return metrics
