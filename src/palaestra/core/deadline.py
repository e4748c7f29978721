"""Deadlines for many coroutines at once: ``within(aw, seconds)`` is ``await aw`` under a timeout, as
``asyncio.timeout`` gives it, at a fraction of its cost when thousands run together.

Why not ``asyncio.timeout``: each one schedules a timer of its own. A timer is an object pushed on the
loop's heap, compared in Python (``TimerHandle.__lt__``) with the log2 of the heap's size of the others,
and left there when cancelled until the heap is rebuilt: with hundreds of rollouts in flight, two
deadlines per rollout cost as much CPU as everything else the runner does around a model call. Every
rollout of a run gets the same deadline, so the deadlines of one length are set in the order they end:
they queue first in, first out (``_Queue``), behind a single timer armed for the first of them that may
still be running. A rollout that ends takes its deadline out in O(1) and leaves the timer as it is; the
timer, when it fires, skips the ones that ended, cancels the ones that are due and arms itself again for
the first still running. So a timer is armed about once per deadline's length, not once per call.

What a caller sees is what ``asyncio.timeout`` gives: the awaiting task is cancelled when the deadline
passes, and ``TimeoutError`` (``asyncio.TimeoutError``) comes out of ``within`` in place of the
cancellation; a cancellation from elsewhere stays a cancellation (the task's cancel count tells them
apart, as it does for ``asyncio.timeout``). Python 3.10 has no cancel count: there ``within`` is
``asyncio.wait_for``."""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections import deque
from collections.abc import Awaitable
from typing import Any, TypeVar

__all__ = ["within"]

T = TypeVar("T")

_LIVE, _DONE, _EXPIRED = 0, 1, 2


class _Deadline:
    """One ``within`` in flight: when it is due, the task it cancels then, and whether it has ended or
    expired."""

    __slots__ = ("state", "task", "when")

    def __init__(self, when: float, task: Any) -> None:
        self.when = when
        self.task = task
        self.state = _LIVE


class _Queue:
    """The deadlines of one length on one loop, oldest first (so in the order they fall due), and the one
    timer that is armed for the first that may still be running."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop = loop
        self.seconds = seconds
        self.queue: deque[_Deadline] = deque()
        self.live = 0
        self.timer: asyncio.TimerHandle | None = None

    def add(self, task: Any) -> _Deadline:
        deadline = _Deadline(self.loop.time() + self.seconds, task)
        self.queue.append(deadline)
        self.live += 1
        if self.timer is None:
            self.timer = self.loop.call_at(deadline.when, self._fire)
        elif len(self.queue) > 2 * self.live + 64:
            # Ended deadlines wait behind a long-running one until the timer reaches them: dropped here
            # once they outnumber the running ones, so the queue stays as long as what is in flight.
            self.queue = deque(d for d in self.queue if d.state == _LIVE)
        return deadline

    def end(self, deadline: _Deadline) -> None:
        if deadline.state == _LIVE:
            deadline.state = _DONE
        self.live -= 1
        if not self.live:
            # Nothing left to watch: nothing is held (no task, no deadline), but the timer stays armed. When
            # it fires it finds the queue empty and stops; cancelling it here and arming a new one for the
            # next deadline cost a timer per call wherever one call runs at a time (each rollout's close).
            self.queue.clear()

    def _fire(self) -> None:
        self.timer = None
        now = self.loop.time()
        queue = self.queue
        while queue:
            first = queue[0]
            if first.state != _LIVE:
                queue.popleft()
            elif first.when <= now:
                queue.popleft()
                first.state = _EXPIRED
                first.task.cancel()
            else:
                self.timer = self.loop.call_at(first.when, self._fire)
                return


# Each loop's queues, by length; ``_last`` is the loop that used them last with its queues (one tuple, read
# and replaced whole, so a loop in another thread never sees another loop's queues): a run has one loop,
# so the lookup is most often one identity check.
_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, _Queue]] = weakref.WeakKeyDictionary()
_last: tuple[asyncio.AbstractEventLoop | None, dict[float, _Queue]] = (None, {})


def _queue(loop: asyncio.AbstractEventLoop, seconds: float) -> _Queue:
    global _last
    last_loop, queues = _last
    if last_loop is not loop:
        queues = _by_loop.setdefault(loop, {})
        _last = (loop, queues)
    queue = queues.get(seconds)
    if queue is None:
        queue = queues.setdefault(seconds, _Queue(loop, seconds))
    return queue


async def within(aw: Awaitable[T], seconds: float) -> T:
    """``await aw``, raising ``asyncio.TimeoutError`` once ``seconds`` have passed (the task awaiting is
    cancelled then, as under ``asyncio.timeout``)."""
    if sys.version_info < (3, 11):
        return await asyncio.wait_for(aw, seconds)
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("within() must be awaited inside a task")
    queue = _queue(task.get_loop(), seconds)
    cancelling = task.cancelling()
    deadline = queue.add(task)
    try:
        return await aw
    except asyncio.CancelledError:
        if deadline.state == _EXPIRED:
            deadline.state = _DONE  # its cancellation is taken back here, once
            if task.uncancel() <= cancelling:  # and nothing else cancelled the task meanwhile
                raise asyncio.TimeoutError from None
        raise
    finally:
        if deadline.state == _EXPIRED:  # expired, but the cancellation did not reach ``aw``: take it back
            task.uncancel()
        queue.end(deadline)
