"""Buffered CSPRNG ids: the right shapes, never repeated, and never shared with a forked child."""

from __future__ import annotations

import os
import re

from palaestra.core import ids


def test_shapes_and_uniqueness() -> None:
    rollouts = [ids.rollout_id() for _ in range(20_000)]  # several refills of the 4 KiB block
    sessions = [ids.session_id() for _ in range(5_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", r) for r in rollouts)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{24}", s) for s in sessions)
    assert len(set(rollouts)) == len(rollouts) and len(set(sessions)) == len(sessions)
    assert len(ids.random_bytes(5000)) == 5000  # larger than the buffer: straight from the OS


def test_a_forked_child_does_not_repeat_the_parents_bytes() -> None:
    ids.random_bytes(1)  # the parent now holds a partly used block
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next id, then leave without running pytest's teardown
        os.close(read)
        os.write(write, ids.rollout_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert re.fullmatch(r"[0-9a-f]{32}", child)
    assert child != ids.rollout_id()  # the parent's next id differs from what the child handed out
