"""Crash-resume figure for issue #11 (a figure, not a test): ``eval run`` killed with SIGKILL at random points
over many trials, each run resumed to the end; prints one JSON line.

  python bench/fault_trials.py                 # 20 trials, a fresh seed
  python bench/fault_trials.py 50 --seed 7     # 50 trials, reproducible

It runs the long ``fuzz`` variant ``tests/rollout/test_eval.py::test_resume_after_sigkill_long`` under
pytest (so the figure comes from exactly what the test suite checks) and reports what that test measured:
``trials``, ``lost`` and ``duplicated`` slots after resume (both must be 0), ``killed_mid_run`` (kills that
found the run still going), ``killed_mid_journal`` (kills between the first and the last scored rollout),
``seconds`` (all trials), ``run_s`` (one unkilled run here), ``seed`` and ``passed`` (pytest's verdict).
Exits non-zero unless the test passed."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/rollout/test_eval.py::test_resume_after_sigkill_long"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("trials", nargs="?", type=int, default=20, help="SIGKILL trials (default 20)")
    parser.add_argument("--seed", type=int, default=None, help="kill-point seed (default: a fresh one)")
    args = parser.parse_args()
    if args.trials < 1:
        parser.error("trials must be at least 1")
    with tempfile.TemporaryDirectory(prefix="palaestra-fault-trials-") as tmp:
        report = Path(tmp) / "report.jsonl"
        env = {**os.environ, "PALAESTRA_FAULT_REPORT": str(report), "PALAESTRA_FAULT_TRIALS": str(args.trials)}
        if args.seed is not None:
            env["PALAESTRA_FAULT_SEED"] = str(args.seed)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", TEST, "--run-fuzz", "-p", "no:cacheprovider",
                               "-q", "--no-header", "-rN"], cwd=ROOT, env=env, capture_output=True, text=True,
                              check=False)
        wall = time.perf_counter() - t0
        lines = report.read_text().splitlines() if report.exists() else []
    if not lines:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        print(json.dumps({"trials": args.trials, "passed": False, "error": "the test reported no result",
                          "pytest_exit": proc.returncode, "wall_s": round(wall, 2)}))
        return 1
    result = json.loads(lines[-1])
    problems = result.pop("problems")
    out = {**result, "passed": proc.returncode == 0, "wall_s": round(wall, 2)}
    if problems:
        out["problems"] = problems[:5]
    if proc.returncode != 0:
        print(proc.stdout[-3000:], file=sys.stderr)
    print(json.dumps(out))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
