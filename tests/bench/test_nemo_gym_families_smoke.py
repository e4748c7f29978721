"""``bench/nemo_gym_families.py`` on two families at tiny size, against the installed NeMo Gym wheel's own
example files: one family a native environment grades (every row it loads is scored, in full, by the
oracle) and one it does not (every row refused at load, with the family's reason, none scored)."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "nemo_gym_families.py"
NEMO_GYM = runpy.run_path(str(ROOT / "tests" / "fixtures" / "nemo_gym.py"))
LIMIT = 2


def test_two_families_tiny() -> None:
    why = NEMO_GYM["missing"]()
    if why:
        pytest.skip(f"nemo-gym: {why}")
    proc = subprocess.run([sys.executable, str(BENCH), "--families", "instruction_following,grl_sokoban",
                           "--limit", str(LIMIT), "--json", "--no-write"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = {t["family"]: t for t in (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))}
    assert set(table) == {"instruction_following", "grl_sokoban"}

    native = table["instruction_following"]
    assert native["env"] == "ifeval" and native["rows"] == LIMIT
    assert native["loaded"] == native["scored"] == LIMIT and native["failed"] == {} and not native["errors"]
    assert native["mean_reward"] == 1.0 and native["scores_rows"] is True

    refused = table["grl_sokoban"]
    assert refused["env"] is None and refused["rows"] == LIMIT
    assert refused["loaded"] == refused["scored"] == 0 and refused["refused"] == LIMIT
    assert "gym-sokoban" in refused["reason"] and refused["scores_rows"] is False
