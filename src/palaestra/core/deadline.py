"""Deadlines for many coroutines at once: ``with time_limit(seconds):`` is a block under a timeout, as
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
passes, and ``TimeoutError`` (``asyncio.TimeoutError``) comes out of the block in place of the
cancellation; a cancellation from elsewhere stays a cancellation (the task's cancel count tells them
apart, as it does for ``asyncio.timeout``). Python 3.10 has no cancel count: there each deadline arms a
timer of its own."""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections import deque
from types import TracebackType
from typing import Any

__all__ = ["time_limit"]


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


class time_limit:
    """``with time_limit(seconds):`` — the block, in the current task, under a deadline: the task is cancelled
    when it passes and ``asyncio.TimeoutError`` comes out of the block in place of the cancellation; a
    cancellation from elsewhere stays a cancellation.

    A plain ``with``, not a coroutine: entering and leaving need no await, so a block under a deadline costs
    no coroutine of its own (nor the closure a caller would otherwise wrap the block in), which is memory
    held by every rollout in flight and work done on every resume of the task. On Python 3.10 (no cancel
    counts) the deadline arms a timer of its own that cancels the task, and a cancellation that meets an
    expired deadline is read as the timeout."""

    __slots__ = ("_cancelling", "_entry", "_expired", "_handle", "_queue", "_task", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no event loop running in this thread
            task = None
        if task is None:
            raise RuntimeError("a time_limit must be entered inside a task (a coroutine run by asyncio)")
        self._task = task
        if sys.version_info < (3, 11):
            self._expired = False
            self._handle = task.get_loop().call_later(self.seconds, self._expire)
            return
        self._queue = queue = _queue(task.get_loop(), self.seconds)
        self._cancelling = task.cancelling()
        self._entry = queue.add(task)

    def _expire(self) -> None:  # Python 3.10
        self._expired = True
        self._task.cancel()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if sys.version_info < (3, 11):
            self._handle.cancel()
            if self._expired and exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
                raise asyncio.TimeoutError from None
            return
        entry = self._entry
        try:
            if entry.state == _EXPIRED:
                # Its cancellation is taken back here, once, whether or not it reached the block. It is the
                # timeout only if it did, and nothing else cancelled the task meanwhile.
                entry.state = _DONE
                if self._task.uncancel() <= self._cancelling and exc_type is not None and issubclass(
                        exc_type, asyncio.CancelledError):
                    raise asyncio.TimeoutError from None
        finally:
            self._queue.end(entry)
