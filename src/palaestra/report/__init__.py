"""Reports of a run: the static ``report.html``, the live trajectory viewer, and run comparison.

Kept cheap to import: the collector calls ``write_report`` at the end of every run, and the viewer server
(Starlette) and exporters (MLflow, W&B) load only when used.
"""

from __future__ import annotations

from palaestra.report.rundata import ReportError
from palaestra.report.static import TranscriptCache, build_report, write_report

__all__ = ["ReportError", "TranscriptCache", "build_report", "write_report"]
