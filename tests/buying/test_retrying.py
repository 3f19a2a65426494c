"""The buyer's retry rule (issue 46): again on an answer lost in flight, on an attempt that
outlasts its share of the one deadline, and on a 409 after its Retry-After; never more than
MAX_ATTEMPTS, never on another error, never past the deadline."""

from __future__ import annotations

import asyncio

import pytest

from svc_gateway.buying.retrying import MAX_ATTEMPTS, new_key, retry_after, with_retries


class Lost(Exception):
    pass


def lost(exc: BaseException) -> bool:
    return isinstance(exc, Lost)


async def test_a_lost_answer_is_asked_again_and_the_result_says_so() -> None:
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise Lost
        return "answer"

    retried = await with_retries(attempt, lost=lost)
    assert retried.value == "answer" and retried.attempts == 2 and retried.from_retry


async def test_retries_are_bounded_and_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    async def always_lost() -> str:
        calls.append(1)
        raise Lost

    with pytest.raises(Lost):
        await with_retries(always_lost, lost=lost)
    assert len(calls) == MAX_ATTEMPTS

    async def broken() -> str:
        calls.append(1)
        raise ValueError("not a lost answer")

    calls.clear()
    with pytest.raises(ValueError):
        await with_retries(broken, lost=lost)
    assert len(calls) == 1


async def test_a_409_waits_its_retry_after_and_the_last_answer_is_returned() -> None:
    answers = iter([(409, {"retry-after": "0"}), (409, {}), (200, {})])

    async def attempt() -> tuple[int, dict[str, str]]:
        return next(answers)

    retried = await with_retries(attempt, lost=lost, busy=lambda r: retry_after(*r))
    assert retried.value == (200, {}) and retried.attempts == 3
    still = iter([(409, {"retry-after": "0"})] * MAX_ATTEMPTS)
    retried = await with_retries(
        lambda: _value(next(still)), lost=lost, busy=lambda r: retry_after(*r)
    )
    assert retried.value[0] == 409 and retried.attempts == MAX_ATTEMPTS
    assert retry_after(409, {"retry-after": "soon"}) == 1.0 and retry_after(200, {}) is None


async def _value(value: tuple[int, dict[str, str]]) -> tuple[int, dict[str, str]]:
    return value


async def test_an_attempt_gets_its_share_of_the_deadline_then_the_next_one_runs() -> None:
    started: list[float] = []
    loop = asyncio.get_running_loop()

    async def slow_then_fast() -> str:
        started.append(loop.time())
        if len(started) == 1:
            await asyncio.sleep(10)
        return "answer"

    deadline = loop.time() + 0.4
    async with asyncio.timeout_at(deadline):
        retried = await with_retries(
            slow_then_fast, lost=lost, deadline=deadline, min_retry_secs=0.05
        )
    assert retried.value == "answer" and retried.attempts == 2
    assert started[1] - started[0] < 0.4  # cut at its share (75 % of the time left)


async def test_with_too_little_time_left_to_retry_an_attempt_gets_all_of_it() -> None:
    loop = asyncio.get_running_loop()
    calls: list[int] = []

    async def slow() -> str:
        calls.append(1)
        await asyncio.sleep(0.2)
        return "answer"

    deadline = loop.time() + 1.0  # under twice the 2 s a retry keeps: no share, no cut
    async with asyncio.timeout_at(deadline):
        retried = await with_retries(slow, lost=lost, deadline=deadline)
    assert retried.value == "answer" and calls == [1]


async def test_the_deadline_s_own_expiry_is_not_taken_for_a_slow_attempt() -> None:
    async def hang() -> str:
        await asyncio.sleep(10)
        return "never"

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await with_retries(hang, lost=lost)  # no deadline given: one attempt, cut outside


def test_a_key_is_a_payment_identifier() -> None:
    key = new_key()
    assert 16 <= len(key) <= 128 and key.replace("_", "").isalnum() and key != new_key()


async def test_a_timeout_of_the_attempt_s_own_making_is_not_retried() -> None:
    calls: list[int] = []

    async def own_timeout() -> str:
        calls.append(1)
        raise TimeoutError  # the attempt's own (an SDK's), not its share of the deadline

    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        await with_retries(own_timeout, lost=lost, deadline=loop.time() + 10)
    assert calls == [1]
