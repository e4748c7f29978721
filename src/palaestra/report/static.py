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

from palaestra.metrics.rows import COLUMNS, Row
from palaestra.report.charts import esc
from palaestra.report.detail import rollout_detail
from palaestra.report.index import JournalIndex
from palaestra.report.overview import build_overview
from palaestra.report.page import dumps, render_page
from palaestra.report.rundata import REPORT, TASKS, RunInfo, load_run_info, run_metrics
from palaestra.rollout.compact import CompactError, RunTasks, expand_record

if TYPE_CHECKING:  # only a type here: importing the report stays cheap (report/__init__.py)
    from palaestra.rollout.results import JournalRead

__all__ = ["DEFAULT_DETAIL_BYTES", "TranscriptCache", "build_report", "write_report"]

DEFAULT_DETAIL_BYTES = 12_000_000


def _priority(row: Row) -> int:
    """Which transcripts a size-capped report keeps first: the ones people open to ask "why?"."""
    if not row.scored:
        return 0 if row.effective else 1  # an infrastructure failure (unrecovered first), then retried ones
    if not row.is_pass:
        return 2 if row.effective else 3  # scored but not passed
    return 4


def _encoded(seq: int, record: Mapping[str, Any] | None) -> bytes | None:
    """The transcript of ``record`` as the page embeds it; None when there is none to show."""
    if record is None:
        return None
    try:
        return dumps(rollout_detail(record, seq))
    except (ValueError, TypeError):  # TypeError: orjson's JSONEncodeError (a value JSON cannot hold)
        return None


class TranscriptCache:
    """Transcripts encoded before the report is built, up to the report's size budget: as the collector
    journals each record (from its full form), or as the end of a run reads a record back and expands it.

    Either way the report is spared a second expansion of the same record (a tenth of the end of a run).
    It is only a cache: the report picks its transcripts as it would without it, and encodes any it does
    not hold. Beyond the budget it holds nothing more, so its memory is bounded however long the run."""

    def __init__(self, budget: int = DEFAULT_DETAIL_BYTES):
        self.budget = budget
        self.used = 0
        self.encoded: dict[int, bytes] = {}

    def add(self, seq: int, record: Mapping[str, Any]) -> None:
        if self.used >= self.budget:
            return
        try:
            blob = _encoded(seq, record)
        except Exception:  # a report bug must not cost the run its read-back (the report tries it again)
            blob = None
        if blob is not None:
            self._hold(seq, blob)

    def merge(self, other: TranscriptCache) -> None:
        """Take ``other``'s transcripts (those of records this one did not see), within the budget."""
        for seq, blob in other.encoded.items():
            if seq not in self.encoded and not self._hold(seq, blob):
                return

    def _hold(self, seq: int, blob: bytes) -> bool:
        """Keep ``blob`` as the transcript of ``seq`` if it fits the budget; False once the cache is full."""
        if self.used + len(blob) > self.budget:
            self.used = self.budget  # full: later transcripts are encoded by the report, if it picks them
            return False
        self.encoded[seq] = blob
        self.used += len(blob)
        return True


def _details(encoded: Iterable[tuple[int, bytes | None]], budget: int) -> tuple[dict[str, orjson.Fragment], int]:
    """Transcripts (in priority order, already encoded) until ``budget`` bytes of them are embedded.

    Each is embedded as the JSON it was encoded to (``orjson.Fragment``): the page's data is not encoded
    a second time."""
    details: dict[str, orjson.Fragment] = {}
    used = 0
    for seq, blob in encoded:
        if blob is None:
            continue
        if used + len(blob) > budget and details:
            break
        details[str(seq)] = orjson.Fragment(blob)
        used += len(blob)
    return details, used


def _priority_order(rows: list[Row]) -> list[int]:
    return [row.seq for row in sorted(rows, key=lambda r: (_priority(r), r.seq))]


def _read_details(info: RunInfo, read: JournalRead, order: list[int], cache: TranscriptCache | None
                  ) -> Iterator[tuple[int, bytes | None]]:
    """Transcripts of ``read``'s records by seq: from ``cache`` where it holds one, else expanded as the
    viewer's index expands them (a task missing from tasks.jsonl reads as a placeholder) and encoded; a
    record that cannot be expanded at all has none."""
    tasks = RunTasks(info.run_dir / TASKS)
    held = cache.encoded if cache is not None else {}
    for seq in order:
        blob = held.get(seq)
        if blob is not None:
            yield seq, blob
            continue
        try:
            yield seq, _encoded(seq, expand_record(read.records[seq], tasks, strict=False))
        except CompactError:
            yield seq, None


def build_report(info: RunInfo, *, max_detail_bytes: int = DEFAULT_DETAIL_BYTES,
                 journal: JournalRead | None = None, transcripts: TranscriptCache | None = None,
                 metrics: dict[str, Any] | None = None) -> bytes:
    """The report page of a run, as UTF-8.

    ``journal``: the journal as the caller already read it (``rollout.results.read_run_journal``, which
    the end of a run shares with metrics.json), so it is not read and expanded a second time, and
    ``transcripts`` what that read-back encoded of it; without ``journal`` the journal is read here,
    through the viewer's index. ``metrics``: the run's metrics.json as the caller just wrote it."""
    detail_source: Iterable[tuple[int, bytes | None]]
    if journal is not None:
        rows = journal.rows
        problems = journal.problems
        detail_source = _read_details(info, journal, _priority_order(rows), transcripts)
    else:
        index = JournalIndex(info.journal)
        index.advance()
        rows, problems = index.rows, index.problems
        detail_source = ((seq, _encoded(seq, rec)) for seq, rec in index.read_records(_priority_order(rows)))
    metrics = run_metrics(info, rows, journal_problems=problems, metrics=metrics)
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
                 journal: JournalRead | None = None, transcripts: TranscriptCache | None = None,
                 expected: dict[tuple[str, str], int] | None = None, metrics: dict[str, Any] | None = None
                 ) -> Path:
    """Write ``RUN_DIR/report.html`` (or ``out``) atomically and return its path.

    Called at the end of every ``eval run``; safe on a run in progress or killed half-way (it reports what
    the journal holds). Raises ReportError when ``run_dir`` is not a run directory. ``journal``,
    ``transcripts`` and ``metrics``: see ``build_report``; ``expected``: see ``load_run_info``. The end of a
    run passes all four, so nothing it has just written is read back.
    """
    info = load_run_info(run_dir, expected=expected)
    html = build_report(info, max_detail_bytes=max_detail_bytes, journal=journal, transcripts=transcripts,
                        metrics=metrics)
    target = Path(out) if out is not None else Path(run_dir) / REPORT
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(html)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
