"""The CLI's exit codes and one-line errors (issue 17): documented in --help, and a run directory that
cannot be written is one clear line naming the path and the fix, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "palaestra.cli.main"]


def test_help_documents_min_coverage_and_exit_codes() -> None:
    proc = subprocess.run(CLI + ["eval", "run", "--help"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0
    assert "--min-coverage" in proc.stdout and "Exit codes" in proc.stdout and "4 failed" in proc.stdout


# ---- filesystem errors on the run directory ---------------------------------------------------------------

def _one_clear_line(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2 and lines[0].startswith("error: cannot create the run directory")
    assert lines[1].startswith("  fix: ")
    return lines


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
def test_unwritable_out_is_one_clear_line(tmp_path: Path, where: str) -> None:
    if where == "under_a_file":  # fails for root too: a path cannot go through a regular file
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "run"
    else:
        out = Path("/proc/palaestra-test-run")
    proc = subprocess.run(CLI + ["eval", "run", "--env", "math", "--limit", "1", "--model", "scripted:oracle",
                                 "--out", str(out), "-q"], capture_output=True, text=True, timeout=120)
    lines = _one_clear_line(proc)
    assert str(out) in lines[0]
    if where == "under_a_file":
        assert "ENOTDIR" in lines[0] and "part of that path is a file" in lines[1]


def test_read_only_filesystem_is_one_clear_line(tmp_path: Path) -> None:
    mnt = tmp_path / "ro"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(mnt)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"tmpfs: cannot mount one here ({mounted.stderr.strip()})")
    try:
        out = mnt / "run"
        proc = subprocess.run(CLI + ["eval", "run", "--env", "math", "--limit", "1", "--model", "scripted:oracle",
                                     "--out", str(out), "-q"], capture_output=True, text=True, timeout=120)
        lines = _one_clear_line(proc)
        assert "EROFS" in lines[0] and str(out) in lines[0] and "read-only" in lines[1]
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_at_creation_is_one_clear_line(tmp_path: Path) -> None:
    mnt = tmp_path / "full"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"tmpfs: cannot mount one here ({mounted.stderr.strip()})")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # fill it to the last block
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        out = mnt / "run"
        proc = subprocess.run(CLI + ["eval", "run", "--env", "math", "--limit", "1", "--model", "scripted:oracle",
                                     "--out", str(out), "-q"], capture_output=True, text=True, timeout=120)
        lines = _one_clear_line(proc)
        assert "ENOSPC" in lines[0] and str(out) in lines[0] and "disk is full" in lines[1]
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
