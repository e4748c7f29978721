"""The output disk fills up mid-run: the run stops with a clear error, nothing is corrupted, and it
resumes once space is freed (a real tmpfs, mounted by the test)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from palaestra.rollout.journal_read import read_journal

CLI = [sys.executable, "-m", "palaestra.cli.main"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mnt)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"tmpfs: cannot mount a tmpfs here ({proc.stderr.strip()}): needs root in a mount namespace")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_stops_cleanly_and_resumes(small_disk: Path) -> None:
    out = small_disk / "run"
    # -c 1: each journal append is one record, so the disk fills between records whatever the load (with more
    # in flight, a slow machine can batch every record into one group commit that does not fit at all).
    cmd = CLI + ["eval", "run", "--env", "workplace", "--model", "scripted:oracle", "-k", "8", "-c", "1",
                 "--out", str(out), "-q"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert first.returncode == 2, first.stdout + first.stderr
    assert "ENOSPC" in first.stderr and "Traceback" not in first.stderr
    records, problems = read_journal(out / "rollouts.jsonl")
    assert not problems  # nothing half-written was left behind
    before = Counter((r["task_id"], r["repeat"]) for r in records if r["outcome"]["status"] == "scored")
    assert 0 < sum(before.values()) < 24 * 8

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    records, problems = read_journal(out / "rollouts.jsonl")
    assert not problems
    scored = Counter((r["task_id"], r["repeat"]) for r in records if r["outcome"]["status"] == "scored")
    assert len(scored) == 24 * 8 and max(scored.values()) == 1
    assert json.loads((out / "metrics.json").read_text())["overall"]["coverage"] == 1.0
