"""Issue 24 #9: slow prompts of one payer to a sync handler never starve another payer. A
payer's requests hold at most half the handler's threads (waiting, running, or still running
after they timed out uncharged); one more is answered 503 with ``Retry-After`` before it takes a
thread, so another payer's fast prompt is served. Over loopback HTTP against the stub
facilitator; ends with conservation."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import httpx
import pytest

from svc_gateway.selling.handlers import (
    HANDLER_PAYER,
    HANDLER_THREADS,
    OverShare,
    SyncHandlerPool,
)
from tests.e2e.test_money_safety import Blocking
from tests.support import until
from tests.support.fixtures import StubMarketFactory
from tests.support.market import paid_post
from tests.support.stub_service import StubService

FLOODER = "0x" + "bb" * 20
OTHER = "0x" + "cc" * 20


async def test_one_payer_flooding_a_sync_handler_never_starves_another(
    make_stub_market: StubMarketFactory,
) -> None:
    handler = Blocking()
    market = await make_stub_market(
        stub=StubService(balance=20), handler=handler, config={"handlerTimeoutSecs": 1.0}
    )
    pool = market.endpoint.flow.handler_pool
    assert pool.workers == HANDLER_THREADS == 8  # a payer's share: 4
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            flood = await asyncio.gather(
                *(paid_post(http, market.url, "stuck", FLOODER) for _ in range(8))
            )
            # four take their share of threads and time out (504, uncharged, still running);
            # the other four are refused at once, before taking a thread
            assert Counter(r.status_code for r in flood) == {504: 4, 503: 4}
            refused = [r for r in flood if r.status_code == 503]
            assert all(r.headers["Retry-After"] == "5" for r in refused)
            assert "nothing was charged" in refused[0].json()["message"]
            assert pool.overdue == 4 and pool.held_by(FLOODER) == 4
            again = await paid_post(http, market.url, "stuck", FLOODER)
            assert again.status_code == 503  # their share is still held
            served = await paid_post(http, market.url, "fast", OTHER)  # within its timeout
            assert served.status_code == 200 and served.json() == {"answer": "fast"}
            handler.unblock.set()  # the flooder's threads return, and their share with them
            await until(lambda: pool.held_by(FLOODER) == 0 and pool.overdue == 0)
            later = await paid_post(http, market.url, "now", FLOODER)
            assert later.status_code == 200
    finally:
        handler.unblock.set()
    # conservation: only the two answers delivered were charged, one credit each
    stub = market.stub
    assert stub.burned == 2
    assert (stub.balance_of(FLOODER), stub.balance_of(OTHER)) == (19, 19)


async def test_a_payers_share_is_given_back_on_every_path() -> None:
    """Finished, cancelled while waiting for a thread, and cancelled while running (given back
    only when the thread returns): the share never leaks and is never given back twice."""
    pool = SyncHandlerPool(workers=2)  # a share of one thread
    gate = threading.Event()
    inside: list[str] = []

    def hold(arg: dict[str, str]) -> bool:
        inside.append(arg["who"])
        return gate.wait(10)

    busy = [asyncio.create_task(pool.run(hold, {"who": "nobody"})) for _ in range(2)]
    await until(lambda: len(inside) == 2)  # both threads taken
    held = HANDLER_PAYER.set(OTHER)
    try:
        queued = asyncio.create_task(pool.run(hold, {"who": "queued"}))
        await until(lambda: pool.held_by(OTHER) == 1)
        with pytest.raises(OverShare):
            await pool.run(hold, {"who": "over"})
        queued.cancel()  # it waited for a thread: its share comes back at once
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert pool.held_by(OTHER) == 0
        gate.set()
        await asyncio.gather(*busy)
        gate.clear()
        running = asyncio.create_task(pool.run(hold, {"who": "running"}))
        await until(lambda: "running" in inside)
        running.cancel()  # its thread still runs: the share stays held until it returns
        with pytest.raises(asyncio.CancelledError):
            await running
        assert pool.held_by(OTHER) == 1 and pool.overdue == 1
        gate.set()
        await until(lambda: pool.held_by(OTHER) == 0 and pool.overdue == 0)
        assert await pool.run(hold, {"who": "last"}) is True
        assert pool.held_by(OTHER) == 0
        assert "queued" not in inside and "over" not in inside
    finally:
        HANDLER_PAYER.reset(held)
        gate.set()
        pool.shutdown()
