"""``docs/nemo_gym_families.md`` is reproducible from the repository: the per-family results are committed
(``bench/results/nemo_gym_families.jsonl``), a later run of some families is merged onto them (its families
replace the earlier rows, its run is added to the runs named in the doc), and ``--render`` writes the doc from
the merged table. No NeMo Gym needed: this reads and writes JSON and markdown only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import nemo_gym_families_doc as doc  # noqa: E402  (bench/ is a folder of scripts, not a package)


def _row(family: str, **over: Any) -> dict[str, Any]:
    row = {"family": family, "env": f"nemo_gym:{family}", "native": False, "rows": 5, "loaded": 5, "scored": 0,
           "mean_reward": None, "policy": "fixed reply", "judge": None, "failed": {"environment": 5}, "refused": 0,
           "reason": "needs_network", "errors": [], "scores_rows": False, "seconds": 1.0, "repeats": 1}
    return row | over


def test_a_later_run_replaces_its_families_and_adds_its_run(tmp_path: Path) -> None:
    base = tmp_path / "results.jsonl"
    doc.write_results([_row("genrm_compare"), _row("wordle")], [{"families": 2, "seconds": 600.0}], base)
    later = tmp_path / "run.jsonl"
    scored = _row("genrm_compare", scored=5, mean_reward=3.0, failed={}, reason="", scores_rows=True, repeats=16)
    later.write_text(json.dumps(scored) + "\n" + json.dumps({"run": {"seconds": 120.0, "argv": []}}) + "\n")
    table, runs = doc.merge([later], base)
    assert [t["family"] for t in table] == ["genrm_compare", "wordle"]
    assert table[0]["scores_rows"] and table[0]["repeats"] == 16 and not table[1]["scores_rows"]
    assert [r["families"] for r in runs] == [2, 1]
    shown, seconds = doc.generated_by(runs)
    assert seconds == 720.0 and "2 families in 10 min; 1 families in 2 min" in shown[-1]
    assert doc.merge([base], base) == doc.merge([], base)  # the base itself is never merged twice


def test_the_committed_doc_is_what_render_writes_from_the_committed_results() -> None:
    """The doc and the results file change together (a run writes both): rendering the committed results
    gives the committed doc, byte for byte."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "nemo_gym_families.py"), "--render", "--no-write",
                           "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    table, runs = doc.merge([])
    assert len(table) == sum(1 for line in done.stdout.splitlines() if '"family"' in line) > 100
    shown, seconds = doc.generated_by(runs)
    assert doc.markdown(table, shown, seconds) == doc.DOC.read_text(encoding="utf-8"), (
        "docs/nemo_gym_families.md is not what bench/results/nemo_gym_families.jsonl renders to: "
        "run `python bench/nemo_gym_families.py --render`")
