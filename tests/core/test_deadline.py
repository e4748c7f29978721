"""``core.deadline.time_limit``: one timer for all the deadlines of one length, with what
``asyncio.timeout`` gives a caller (the value, TimeoutError once due, a cancellation from elsewhere kept).

Most tests put one awaitable under it (``within``, below); the last ones a block of several awaits, as the
runner does with a rollout's phases."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from palaestra.core import deadline
from palaestra.core.deadline import time_limit

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="python3.11: on Python 3.10 a deadline arms its own timer (no cancel counts)")

T = TypeVar("T")


async def within(aw: Awaitable[T], seconds: float) -> T:
    with time_limit(seconds):
        return await aw


async def _never() -> None:
    await asyncio.Event().wait()


async def _value(x: int) -> int:
    await asyncio.sleep(0)
    return x


def _queue(seconds: float) -> deadline._Queue:
    return deadline._queue(asyncio.get_running_loop(), seconds)


async def test_value_and_error_pass_through_and_nothing_is_held() -> None:
    assert await within(_value(7), 30.0) == 7

    async def boom() -> None:
        raise ValueError("x")

    with pytest.raises(ValueError):
        await within(boom(), 30.0)
    queue = _queue(30.0)
    assert queue.live == 0 and not queue.queue  # no task or deadline held once none is running


async def test_due_deadline_is_a_timeout_and_the_task_is_not_left_cancelled() -> None:
    with pytest.raises(asyncio.TimeoutError):
        await within(_never(), 0.01)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    assert await within(_value(3), 0.01) == 3  # the task goes on as if nothing happened
    assert _queue(0.01).live == 0


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    started = asyncio.Event()

    async def waiter() -> None:
        started.set()
        await within(_never(), 60.0)

    task = asyncio.ensure_future(waiter())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _queue(60.0).live == 0


async def test_many_at_once_each_gets_its_own_outcome() -> None:
    async def one(i: int) -> str:
        try:
            return str(await within(_value(i) if i % 3 else _never(), 0.05))
        except asyncio.TimeoutError:
            return "timeout"

    results = await asyncio.gather(*(one(i) for i in range(300)))
    assert results == ["timeout" if i % 3 == 0 else str(i) for i in range(300)]
    assert _queue(0.05).live == 0 and not _queue(0.05).queue


async def test_nested_deadlines_of_different_lengths() -> None:
    async def inner() -> str:
        try:
            await within(_never(), 0.01)
        except asyncio.TimeoutError:
            return "inner timed out"
        return "no"

    assert await within(inner(), 60.0) == "inner timed out"
    with pytest.raises(asyncio.TimeoutError):  # the outer one, shorter, fires through the inner one
        await within(within(_never(), 60.0), 0.01)


async def test_ended_deadlines_behind_a_running_one_do_not_pile_up() -> None:
    long_one = asyncio.ensure_future(within(_never(), 5.0))
    await asyncio.sleep(0)
    queue = _queue(5.0)
    for i in range(2000):
        assert await within(_value(i), 5.0) == i
        assert len(queue.queue) <= 2 * (queue.live + 1) + 65  # purged as it is added to
    long_one.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long_one
    assert queue.live == 0 and not queue.queue


async def test_one_call_at_a_time_arms_one_timer_not_one_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deadline that is alone in flight when it ends (a rollout's close) leaves its timer armed for the
    next one: a thousand calls in a row arm the timer once, and a late one still times out."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        armed.append(when)
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting)
    for i in range(1000):
        assert await within(_value(i), 7.5) == i
    assert len(armed) == 1
    queue = _queue(7.5)
    assert queue.live == 0 and not queue.queue and queue.timer is not None

    handle = queue.timer
    handle.cancel()
    queue._fire()  # the timer's callback, as when it fires with nothing in flight: it stops, cancelling nothing
    assert queue.timer is None and len(armed) == 1
    assert await within(_value(1), 7.5) == 1  # and the next deadline arms it again
    assert len(armed) == 2 and armed[1] > armed[0]


async def test_a_block_of_several_awaits_is_one_deadline_and_its_locals_survive() -> None:
    """The runner's use: the phases of a rollout in one block. What the block set before the deadline
    passed is there after it (the phase it was in), and a block that ends in time leaves nothing held."""
    phase = "none"
    with pytest.raises(asyncio.TimeoutError), time_limit(0.02):
        phase = "seed"
        assert await _value(1) == 1
        phase = "agent"
        await _never()
    assert phase == "agent"
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    with time_limit(0.02):
        total = await _value(2) + await _value(3)
    assert total == 5 and _queue(0.02).live == 0


async def test_an_error_raised_in_the_block_comes_out_as_it_is() -> None:
    with pytest.raises(KeyError), time_limit(30.0):
        await _value(1)
        raise KeyError("x")
    assert _queue(30.0).live == 0


def test_a_time_limit_outside_a_task_is_refused() -> None:
    with pytest.raises(RuntimeError, match="inside a task"), time_limit(1.0):
        pass
