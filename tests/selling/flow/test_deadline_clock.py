"""The flow's deadlines are ``asyncio.timeout``'s (issue 42: no clock of its own). The worker,
built directly on an in-process seller: a handler past ``handlerTimeoutSecs`` is answered 504
and counted, uncharged; one done in time is untouched; a cancellation from outside passes
through as a cancellation."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest

from svc_gateway.selling.flow.refusals import Refusals
from svc_gateway.selling.flow.work import Worker
from svc_gateway.selling.handlers import Answer, SyncHandlerPool
from svc_gateway.selling.state.stats import PaidStats
from svc_gateway.selling.types import PaidRequest
from svc_gateway.service.seller import SellerSettings


class Seller:
    """An in-process seller: settings only (the worker calls no service)."""

    def __init__(self, handler_timeout_secs: float) -> None:
        self.settings = SellerSettings("local", handler_timeout_secs=handler_timeout_secs)

    def client(self) -> Any:
        raise AssertionError("the worker calls no service")

    public_client = client


def worker(secs: float) -> Worker:
    stats = PaidStats()
    return Worker(Seller(secs), stats, Refusals(stats, SyncHandlerPool()))


def request(work: Any) -> PaidRequest:
    return PaidRequest(token="t", url="http://127.0.0.1/x", work=work)


def test_the_flow_has_no_deadline_clock_of_its_own() -> None:
    assert importlib.util.find_spec("svc_gateway.selling.flow.deadlines") is None


async def test_a_passed_deadline_answers_504_and_counts_it() -> None:
    reached = False

    async def slow() -> Answer:
        nonlocal reached
        await asyncio.sleep(5)
        reached = True
        return Answer(200, b"{}")

    part = worker(0.05)
    answer = await part.run(request(slow))
    assert answer.status == 504 and not reached
    assert part.stats.handler_timeouts == 1
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # its own cancel was taken back


async def test_a_block_done_in_time_is_untouched() -> None:
    async def quick() -> Answer:
        await asyncio.sleep(0)
        return Answer(200, b"{}")

    part = worker(5)
    assert (await part.run(request(quick))).status == 200
    await asyncio.sleep(0.01)
    assert part.stats.handler_timeouts == 0 and part.stats.handler_failures == 0


async def test_a_cancellation_from_outside_passes_through_as_cancelled() -> None:
    async def slow() -> Answer:
        await asyncio.sleep(5)
        return Answer(200, b"{}")

    part = worker(5)
    task = asyncio.create_task(part.run(request(slow)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert part.stats.handler_timeouts == 0
