"""``report.html``: one self-contained file per run that a reviewer can open offline.

Every rollout is listed (as a summary row), but full transcripts are embedded only up to a size budget
so the file stays openable for big runs: rollouts that did not pass come first, because they are the ones
people open; the rest is one ``palaestra view RUN_DIR`` away.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from palaestra.report.charts import esc
from palaestra.report.detail import rollout_detail
from palaestra.report.index import JournalIndex
from palaestra.report.overview import build_overview
from palaestra.report.page import render_page
from palaestra.report.rows import COLUMNS, Effective, Row, row_from_record
from palaestra.report.rundata import REPORT, TASKS, RunInfo, load_run_info, run_metrics
from palaestra.rollout.compact import CompactError, RunTasks, expand_record

if TYPE_CHECKING:  # only a type here: importing the report stays cheap (report/__init__.py)
    from palaestra.rollout.results import JournalRead

__all__ = ["DEFAULT_DETAIL_BYTES", "build_report", "write_report"]

DEFAULT_DETAIL_BYTES = 12_000_000


def _priority(row: Row) -> int:
    """Which transcripts a size-capped report keeps first: the ones people open to ask "why?"."""
    if not row.scored:
        return 0 if row.effective else 1  # an infrastructure failure (unrecovered first), then retried ones
    if not row.is_pass:
        return 2 if row.effective else 3  # scored but not passed
    return 4


def _details(records: Iterable[tuple[int, Mapping[str, Any] | None]], budget: int
             ) -> tuple[dict[str, orjson.Fragment], int]:
    """Transcripts of ``records`` (in priority order) until ``budget`` bytes of them are embedded.

    Each is serialised once, to know its size, and embedded as that JSON (``orjson.Fragment``): the page's
    data is not encoded a second time."""
    details: dict[str, orjson.Fragment] = {}
    used = 0
    for seq, record in records:
        if record is None:
            continue
        try:
            encoded = orjson.dumps(rollout_detail(record, seq), option=orjson.OPT_NON_STR_KEYS)
        except (ValueError, TypeError):  # TypeError: orjson's JSONEncodeError (a value JSON cannot hold)
            continue
        if used + len(encoded) > budget and details:
            break
        details[str(seq)] = orjson.Fragment(encoded)
        used += len(encoded)
    return details, used


def _priority_order(rows: list[Row]) -> list[int]:
    return [row.seq for row in sorted(rows, key=lambda r: (_priority(r), r.seq))]


def _rows_of(records: list[dict[str, Any]]) -> list[Row]:
    """Summary rows of records already read, with the same effective flags JournalIndex gives them."""
    effective, rows = Effective(), []
    for seq, rec in enumerate(records):
        row = row_from_record(seq, rec)
        effective.add(row)
        rows.append(row)
    return rows


def _read_details(info: RunInfo, read: JournalRead, order: list[int]
                  ) -> Iterator[tuple[int, Mapping[str, Any] | None]]:
    """Records of ``read`` by seq, expanded as the viewer's index expands them (a task missing from
    tasks.jsonl reads as a placeholder); one that cannot be expanded at all is left out."""
    tasks = RunTasks(info.run_dir / TASKS)
    for seq in order:
        try:
            yield seq, expand_record(read.records[seq], tasks, strict=False)
        except CompactError:
            yield seq, None


def build_report(info: RunInfo, *, max_detail_bytes: int = DEFAULT_DETAIL_BYTES,
                 journal: JournalRead | None = None) -> str:
    """The report page of a run as a string.

    ``journal``: the journal as the caller already read it (``rollout.results.read_run_journal``, which
    the end of a run shares with metrics.json), so it is not read and expanded a second time; without it
    the journal is read here, through the viewer's index."""
    if journal is not None:
        rows = _rows_of(journal.records)
        problems = journal.problems
        detail_source = _read_details(info, journal, _priority_order(rows))
    else:
        index = JournalIndex(info.journal)
        index.advance()
        rows, problems = index.rows, index.problems
        detail_source = index.read_records(_priority_order(rows))
    metrics = run_metrics(info, rows, journal_problems=problems)
    groups: dict[str, int] = {}
    json_rows = [r.to_json(groups) for r in rows]
    details, _ = _details(detail_source, max_detail_bytes) if rows else ({}, 0)
    data = {
        "mode": "static",
        "columns": list(COLUMNS),
        "groups": list(groups),
        "rows": json_rows,
        "tasks": sorted({r.task_id for r in rows}),
        "details": details,
        "run_dir": str(info.run_dir),
    }
    note = ""
    if len(details) < len(rows):
        note = (f'<p class="muted">Transcripts of {len(details)} of {len(rows)} rollouts are embedded (failures '
                "first, then rollouts that did not pass); open the rest with "
                f"<code>palaestra view {esc(info.run_dir)}</code>.</p>")
    return render_page(title=info.title, overview_html=build_overview(rows, metrics, info.manifest),
                       data=data, extra_sections=note)


def write_report(run_dir: Path, *, out: Path | None = None, max_detail_bytes: int = DEFAULT_DETAIL_BYTES,
                 journal: JournalRead | None = None) -> Path:
    """Write ``RUN_DIR/report.html`` (or ``out``) atomically and return its path.

    Called at the end of every ``eval run``; safe on a run in progress or killed half-way (it reports what
    the journal holds). Raises ReportError when ``run_dir`` is not a run directory. ``journal``: see
    ``build_report``.
    """
    info = load_run_info(run_dir)
    html = build_report(info, max_detail_bytes=max_detail_bytes, journal=journal)
    target = Path(out) if out is not None else Path(run_dir) / REPORT
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
