"""numpy's first import, with OpenBLAS kept to the calling thread.

Why: the statistics here (bootstrap resampling, quantiles, permutation tests) make no BLAS call, yet
OpenBLAS starts a worker thread per core when numpy is first imported, and each spins for a while
before it sleeps. At the end of an `eval run` that is ~50 ms of a second core burnt for nothing on the
machine whose CPU the run is measured on, and under valgrind it made a run's instruction count depend
on the machine's load (``bench/instructions.py`` read a negative cost per rollout on a loaded machine).

A user's own setting wins: if any of the variables OpenBLAS reads is set, or numpy is already imported
(by torch or transformers, for the local model), nothing changes. The variable is set for the import
only, so subprocesses started later (sandboxes, environment servers) inherit the user's environment.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from palaestra.settings import has_variable, scoped_variables

# What OpenBLAS reads for its thread count at load time, in its order of precedence.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Wrap numpy's import in this: OpenBLAS then starts no worker thread (see the module's docstring)."""
    if "numpy" in sys.modules or any(has_variable(v) for v in THREAD_VARIABLES):
        yield
        return
    with scoped_variables({"OPENBLAS_NUM_THREADS": "1"}):
        yield
