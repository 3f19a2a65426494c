"""The flow's deadlines (one sweep per loop) behave as ``asyncio.timeout``: a task past its
deadline gets ``TimeoutError``, a cancellation from outside stays a cancellation, and the sweep
stops once no deadline is registered."""

from __future__ import annotations

import asyncio

import pytest

from svc_gateway.selling.flow.deadlines import Deadlines


async def test_a_task_past_its_deadline_gets_timeout_error() -> None:
    deadlines = Deadlines()
    deadline = deadlines.within(0.05)
    with pytest.raises(TimeoutError), deadline:
        await asyncio.sleep(5)
    assert deadline.expired()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # its own cancellation taken back


async def test_a_block_done_in_time_is_left_as_it_is() -> None:
    deadlines = Deadlines()
    with deadlines.within(5) as deadline:
        await asyncio.sleep(0)
    assert not deadline.expired()
    with deadlines.within(None):
        await asyncio.sleep(0)


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    deadlines = Deadlines()
    entered = asyncio.Event()

    async def worker() -> None:
        with deadlines.within(5):
            entered.set()
            await asyncio.sleep(5)

    task = asyncio.create_task(worker())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_outside_cancellation_during_an_expired_deadline_is_not_a_timeout() -> None:
    deadlines = Deadlines(sweep_secs=0.01)
    entered = asyncio.Event()

    async def worker() -> None:
        with deadlines.within(0.0):
            entered.set()
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # someone else asks too
            await asyncio.sleep(5)

    task = asyncio.create_task(worker())
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_sweep_stops_when_no_deadline_is_registered() -> None:
    deadlines = Deadlines(sweep_secs=0.01)
    with deadlines.within(5):
        await asyncio.sleep(0)
    assert deadlines._sweep is not None  # armed by the first deadline
    await asyncio.sleep(0.05)
    assert deadlines._sweep is None and not deadlines._due


async def test_deadlines_on_many_tasks_each_fire_for_their_own_task() -> None:
    deadlines = Deadlines(sweep_secs=0.01)

    async def wait(seconds: float) -> str:
        try:
            with deadlines.within(seconds):
                await asyncio.sleep(0.2)
        except TimeoutError:
            return "timeout"
        return "done"

    results = await asyncio.gather(wait(0.02), wait(5), wait(0.03))
    assert list(results) == ["timeout", "done", "timeout"]
