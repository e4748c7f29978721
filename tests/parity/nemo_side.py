"""The NeMo Gym side of the parity tests, shared by ``test_nemo_parity.py`` and ``test_nemo_parity_families.py``.

Where the installed wheel's resources servers and their published example rows are, and NeMo Gym's own
verdict for a batch of (row, reply) cases, from ``nemo_driver.py`` run by the NeMo Gym venv's interpreter
(never Palaestra's: the verifiers are imported from the wheel, not copied). Read by file path
(``runpy.run_path``), like ``tests/fixtures/nemo_gym.py``: the test folders are no packages.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
NG = SimpleNamespace(**runpy.run_path(str(HERE.parent / "fixtures" / "nemo_gym.py")))
DRIVER = HERE / "nemo_driver.py"


def resources_dir() -> Path:
    """The installed wheel's ``resources_servers`` package folder."""
    found = sorted(NG.venv_dir().glob("lib/python3*/site-packages/resources_servers"))
    assert found, f"NeMo Gym at {NG.venv_dir()} has no resources_servers package"
    return found[-1]


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def example_rows(server: str, pattern: str = "example*.jsonl") -> list[tuple[str, dict[str, Any]]]:
    """(file name, row) for every published example row of a server (rollouts and metrics excluded)."""
    data = resources_dir() / server / "data"
    return [(path.name, row) for path in sorted(data.glob(pattern))
            if "rollouts" not in path.name for row in jsonl(path)]


def nemo_rewards(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """NeMo Gym's verdict per case, from its own verifiers in its own interpreter."""
    with tempfile.TemporaryDirectory() as scratch:  # Hydra may write outputs/ into the cwd
        proc = subprocess.run(
            [str(NG.python_path()), str(DRIVER)], input="".join(json.dumps(c) + "\n" for c in cases),
            capture_output=True, text=True, timeout=600, cwd=scratch,
            env={**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": ""},
        )
    assert proc.returncode == 0, (f"the NeMo Gym driver failed (a verifier's requirement missing? "
                                  f"`bash .ci/setup-nemo-gym.sh` installs them):\n{proc.stderr[-4000:]}")
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert len(results) == len(cases), proc.stderr[-4000:]
    return results
