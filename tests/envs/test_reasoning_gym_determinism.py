"""reasoning-gym rows mean the same entry in every process: rows generated under one string-hash seed are
verified under two others (one of them hash seed 0, where generation runs in-process, the others through
the hash-seed-0 worker), and the oracle gets full reward in each. The sample holds the three datasets whose
library generators follow the hash seed and one that draws from numpy's global state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym", reason="reasoning-gym: the [reasoning] extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "reasoning_gym_oracle.py"
SAMPLE = "isomorphic_strings,polynomial_multiplication,ransom_note,codeio,composite,leg_counting"


def _bench(hash_seed: str, *args: str) -> tuple[dict[str, dict[str, object]], subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    proc = subprocess.run([sys.executable, str(BENCH), "--datasets", SAMPLE, "--size", "2", "--json", *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    table = {r["dataset"]: r for r in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    return table, proc


def test_rows_from_one_hash_seed_verify_with_oracle_one_under_others(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    written, proc = _bench("1", "--write-rows", str(rows))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    questions = {json.loads(line)["id"]: json.loads(line)["input"] for line in rows.read_text().splitlines()}
    assert len(questions) == 12
    for hash_seed in ("2", "0"):
        table, proc = _bench(hash_seed, "--rows", str(rows))
        assert proc.returncode == 0, (hash_seed, proc.stdout[-3000:] + proc.stderr[-3000:])
        for name in SAMPLE.split(","):
            row = table[name]
            assert row["rows"] == row["scored"] == 2 and row["oracle"] == 1.0 and not row["errors"], (hash_seed, row)
    again = tmp_path / "again.jsonl"
    _bench("3", "--write-rows", str(again))
    assert {json.loads(line)["id"]: json.loads(line)["input"] for line in again.read_text().splitlines()} == questions
