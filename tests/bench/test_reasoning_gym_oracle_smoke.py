"""``bench/reasoning_gym_oracle.py --tiny``: the per-dataset table, the gate, and ``no_reference`` listed apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym", reason="reasoning-gym: the [reasoning] extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "reasoning_gym_oracle.py"


def test_tiny_run_prints_the_table_and_passes_the_gate() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--tiny", "--json"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = {r["dataset"]: r for r in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    expected = {"isomorphic_strings", "polynomial_multiplication", "ransom_note", "codeio", "composite",
                  "graph_color", "boxnet", "leg_counting"}
    assert set(table) == expected
    assert table["boxnet"]["status"] == "no_reference" and table["boxnet"]["scored"] == 0
    for name, row in table.items():
        assert row["rows"] == 1 and not row["errors"], (name, row)
        if name != "boxnet":
            assert row["status"] == "ok" and row["scored"] == 1 and row["oracle"] == 1.0, (name, row)
    assert "no_reference: boxnet" in proc.stderr and "below the gate: -" in proc.stderr


def test_a_dataset_below_the_gate_fails_the_run(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    subprocess.run([sys.executable, str(BENCH), "--datasets", "gcd", "--size", "1", "--write-rows", str(rows)],
                   capture_output=True, text=True, timeout=600, cwd=ROOT, check=True)
    row = json.loads(rows.read_text())
    row["input"] = "What is the GCD of 4 and 6?"  # a row the library does not generate: an error, not a pass
    rows.write_text(json.dumps(row) + "\n")
    proc = subprocess.run([sys.executable, str(BENCH), "--datasets", "gcd", "--rows", str(rows), "--json"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["status"] == "error" and "below the gate: gcd" in proc.stderr
