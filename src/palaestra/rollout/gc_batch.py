"""The cyclic GC's settings for a process that collects rollouts: one policy for the CLI's one-process run
and each worker process of ``--cluster local``."""

from __future__ import annotations

import gc

# The young generation's size, in net allocations of tracked objects. Each pass of it walks every object
# alive at that moment, and while a run collects that is mostly the rollouts in flight (~500 objects
# each), only to promote them: a pass every 50,000 allocations cost 1.5 % of a single-turn rollout's
# instructions (valgrind, 2,000 rollouts) and more of its CPU time (the walk misses the caches), a pass
# every 500,000 next to nothing. Acyclic garbage is freed by reference counting as before; what waits
# longer is cyclic garbage only, of which a run makes little (~0.25 objects per rollout measured over
# 8,000 single-turn rollouts).
YOUNG = 500_000


def tune_gc_for_batch() -> None:
    """Make the cyclic GC cheap for a collection job.

    A run allocates millions of short-lived, acyclic objects (messages, records, futures); with the default
    thresholds the collector runs thousands of times and each full pass re-walks every module and class
    imported at start-up. Freezing the start-up heap takes it out of those passes, and a larger young
    generation makes passes rarer (``YOUNG``); the rare real cycles are still collected.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG, 50, 50)
