"""The bootstrap's numpy import leaves OpenBLAS to the calling thread, unless the user said otherwise.

Each case runs in a fresh interpreter: OpenBLAS reads its thread count once, when numpy is first imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from palaestra.metrics.blas import THREAD_VARIABLES

PROBE = """
import json, os
from palaestra.metrics.blas import THREAD_VARIABLES
from palaestra.metrics.passk import cluster_bootstrap_ci
interval = cluster_bootstrap_ci([1.0, 0.0, 1.0, 1.0], [1, 1, 1, 1], n_boot=200)
print(json.dumps({"threads": len(os.listdir("/proc/self/task")), "interval": interval,
                  "env": {k: os.environ.get(k) for k in THREAD_VARIABLES}}))
"""


def probe(**env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         check=True).stdout
    result: dict[str, object] = json.loads(out)
    return result


def test_the_bootstrap_starts_no_blas_thread_and_leaves_the_environment_as_it_found_it() -> None:
    got = probe()
    assert got["threads"] == 1  # OpenBLAS alone would start one worker per further core
    assert got["interval"] is not None
    assert got["env"] == dict.fromkeys(THREAD_VARIABLES)  # set for the import only: children inherit the user's


def test_a_users_thread_count_is_kept() -> None:
    got = probe(OPENBLAS_NUM_THREADS="2")
    assert got["threads"] == min(2, os.cpu_count() or 1)
    assert got["env"] == {**dict.fromkeys(THREAD_VARIABLES), "OPENBLAS_NUM_THREADS": "2"}
