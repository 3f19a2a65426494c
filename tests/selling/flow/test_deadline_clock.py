"""The flow's deadlines (``selling.flow.deadlines``) keep ``asyncio.timeout``'s rules: a passed
deadline cancels the block and raises ``TimeoutError``, a cancellation from outside passes
through, one timer serves every deadline of a length, finished ones are not kept."""

from __future__ import annotations

import asyncio

import pytest

from svc_gateway.selling.flow.deadlines import CLOCKS_KEPT, Clock, Deadline, Deadlines


async def _timer_count() -> int:
    loop = asyncio.get_running_loop()
    return sum(1 for h in loop._scheduled if not h.cancelled())  # type: ignore[attr-defined]


async def test_a_passed_deadline_raises_timeout_and_says_it_expired() -> None:
    deadlines = Deadlines()
    deadline = deadlines(0.05)
    reached = False
    with pytest.raises(TimeoutError), deadline:
        await asyncio.sleep(5)
        reached = True
    assert deadline.expired()
    assert not reached
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # its own cancel was taken back


async def test_a_block_done_in_time_is_untouched() -> None:
    deadline = Deadlines()(5)
    with deadline:
        await asyncio.sleep(0)
    assert not deadline.expired()
    await asyncio.sleep(0.01)
    assert not deadline.expired()


async def test_a_cancellation_from_outside_passes_through_as_cancelled() -> None:
    deadlines = Deadlines()
    seen: list[Deadline] = []

    async def body() -> None:
        deadline = deadlines(5)
        seen.append(deadline)
        with deadline:
            await asyncio.sleep(5)

    task = asyncio.create_task(body())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not seen[0].expired()


async def test_an_outside_cancel_at_the_same_time_as_the_deadline_stays_a_cancel() -> None:
    deadlines = Deadlines()
    seen: list[Deadline] = []
    started = asyncio.Event()

    async def body() -> None:
        deadline = deadlines(0.02)
        seen.append(deadline)
        with deadline:
            started.set()
            try:
                await asyncio.sleep(5)
            finally:
                # the deadline passes while the block's cleanup waits; the owner cancels too
                await asyncio.sleep(0.05)

    task = asyncio.create_task(body())
    await started.wait()
    await asyncio.sleep(0.03)  # the deadline has fired: the task is being cancelled by it
    task.cancel()  # and by its owner: the owner's cancel must not become a TimeoutError
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_many_deadlines_of_one_length_share_one_timer_and_fire_in_order() -> None:
    deadlines = Deadlines()
    before = await _timer_count()
    order: list[int] = []
    entered = 0
    all_in = asyncio.Event()

    async def body(i: int) -> None:
        nonlocal entered
        try:
            with deadlines(0.05):
                entered += 1
                if entered == 50:
                    all_in.set()
                await asyncio.sleep(5)
        except TimeoutError:
            order.append(i)

    tasks = [asyncio.create_task(body(i)) for i in range(50)]
    await all_in.wait()
    await asyncio.sleep(0)  # the 50th is asleep too
    # 50 tasks asleep (50 timers of their own sleeps) and one for all their deadlines
    assert await _timer_count() - before == 50 + 1
    await asyncio.gather(*tasks)
    assert order == list(range(50))


async def test_finished_deadlines_are_not_kept() -> None:
    deadlines = Deadlines()
    for _ in range(1000):
        with deadlines(30):
            pass
    clock = next(iter(deadlines._clocks.values()))
    assert len(clock) <= 1  # the last one, dropped when the next enters


async def test_a_long_request_does_not_keep_later_finished_ones_past_their_length() -> None:
    clock = Clock(asyncio.get_running_loop(), 0.05)
    slow = Deadline(clock)
    with pytest.raises(TimeoutError), slow:
        for _ in range(100):
            with Deadline(clock):
                pass
        assert len(clock) == 101  # behind the live one at the front
        await asyncio.sleep(5)
    assert slow.expired()
    assert len(clock) == 0  # the timer swept the finished ones with it


async def test_a_deadline_is_entered_once() -> None:
    deadline = Deadlines()(5)
    with deadline:
        pass
    with pytest.raises(RuntimeError, match="once"), deadline:
        pass


def test_each_loop_gets_its_own_clock() -> None:
    deadlines = Deadlines()

    async def one() -> bool:
        deadline = deadlines(0.01)
        try:
            with deadline:
                await asyncio.sleep(1)
        except TimeoutError:
            return deadline.expired()
        return False

    assert asyncio.run(one())
    assert asyncio.run(one())  # a second loop: not the first (closed) loop's clock
    assert len(deadlines._clocks) == 2


def test_a_deadline_outside_a_task_is_refused() -> None:
    """Entered from a loop callback (a running loop, no task): nothing to cancel, refused."""
    loop = asyncio.new_event_loop()
    deadlines = Deadlines()
    refused: list[str] = []

    def callback() -> None:
        try:
            deadlines(1).__enter__()
        except RuntimeError as exc:
            refused.append(str(exc))
        loop.stop()

    loop.call_soon(callback)
    loop.run_forever()
    loop.close()
    assert refused == ["a Deadline is used inside a task"]


async def test_many_lengths_start_afresh_and_every_deadline_still_fires() -> None:
    deadlines = Deadlines()
    first = deadlines(0.05)  # its clock is dropped from the table below, its timer is not
    for i in range(CLOCKS_KEPT):
        with deadlines(10 + i):
            pass
    assert len(deadlines._clocks) == 1  # the table was full: started afresh
    with pytest.raises(TimeoutError), first:
        await asyncio.sleep(5)
    assert first.expired()
