"""Sessions are unguessable, expire, and memory stays bounded under 10,000 of them."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest

from palaestra.core.errors import SessionLimit
from palaestra.core.records import Task
from palaestra.envs.registry import load_env
from palaestra.server.sessions import EnvironmentHost


async def test_ten_thousand_sessions_stay_bounded_and_expire() -> None:
    host = EnvironmentHost(load_env("mcqa"), ttl_s=3600, max_sessions=10_000)
    task = Task(id="q", env="mcqa", input="Q?", metadata={"options": ["a", "b"], "expected_answer": "A"})
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    ids = [(await host.open(task))["session_id"] for _ in range(10_000)]
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert len(set(ids)) == 10_000 and all(len(i) >= 24 for i in ids)  # 144 random bits each
    assert used / 10_000 < 4096, f"{used / 10_000:.0f} bytes per session"
    with pytest.raises(SessionLimit):
        await host.open(task)  # the cap holds: no unbounded growth
    host.ttl_s = 0.0
    await asyncio.sleep(0.01)
    assert await host.reap() == 10_000
    assert not host.sessions and host.closed_total == 10_000
    await host.open(task)  # and the host works again
