"""The long fault-injection and fuzz variants (issue #11), run on demand; prints one JSON line.

  python bench/fuzz_long.py                  # every test marked `fuzz` (minutes each)
  python bench/fuzz_long.py -k schemathesis  # a subset (any pytest -k expression)
  python bench/fuzz_long.py --tiny tests/fuzz/test_task_rows.py  # a smoke-test size (tests/bench runs this)

CI runs the short variants of the same tests; the long ones (more hypothesis examples, 20 SIGKILL
trials, schemathesis against live sessions) stay behind the ``fuzz`` marker so CI keeps under its budget.
This runs them under pytest exactly as the suite defines them and reports ``tests``, ``passed``,
``failed``, ``skipped``, the slowest tests with their seconds, and the failures' names. Exits non-zero when
any failed, so a scheduled job can alert on it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def summarize(junit: Path) -> dict[str, object]:
    """Counts, the slowest cases and the failures from pytest's JUnit XML report."""
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    failed, skipped, timings = [], 0, []
    for case in cases:
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        timings.append((float(case.get("time") or 0.0), name))
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif case.find("skipped") is not None:
            skipped += 1
    timings.sort(reverse=True)
    return {"tests": len(cases), "passed": len(cases) - len(failed) - skipped, "failed": len(failed),
            "skipped": skipped, "failures": failed,
            "slowest": [{"test": name, "seconds": round(t, 1)} for t, name in timings[:5]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("paths", nargs="*", default=["tests"], help="test paths (default: tests)")
    parser.add_argument("-k", dest="keyword", default=None, help="only tests matching this pytest -k expression")
    parser.add_argument("--examples", type=int, default=None,
                        help="cap every long variant's hypothesis examples (PALAESTRA_FUZZ_EXAMPLES)")
    parser.add_argument("--trials", type=int, default=None, help="SIGKILL trials (PALAESTRA_FAULT_TRIALS)")
    parser.add_argument("--tiny", action="store_true",
                        help="a smoke-test size: 2 examples per long variant and 1 SIGKILL trial")
    args = parser.parse_args()
    env = dict(os.environ)
    examples, trials = (args.examples or 2, args.trials or 1) if args.tiny else (args.examples, args.trials)
    if examples is not None:
        env["PALAESTRA_FUZZ_EXAMPLES"] = str(examples)
    if trials is not None:
        env["PALAESTRA_FAULT_TRIALS"] = str(trials)
    with tempfile.TemporaryDirectory(prefix="palaestra-fuzz-long-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-m", "fuzz", "-p", "no:cacheprovider", f"--junitxml={junit}",
               "-q", *args.paths]
        if args.keyword:
            cmd += ["-k", args.keyword]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wall = time.perf_counter() - t0
        if not junit.is_file():
            print(json.dumps({"bench": "fuzz_long", "ok": False, "error": proc.stdout[-2000:]}), flush=True)
            return 1
        counts = summarize(junit)
        result = {"bench": "fuzz_long", **counts, "seconds": round(wall, 1)}
    result["ok"] = proc.returncode == 0 and counts["failed"] == 0 and counts["tests"] != 0
    print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
