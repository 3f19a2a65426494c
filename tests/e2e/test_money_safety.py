"""Issue 16 #1-#4, the seller's items: time plans, cancellations, disconnects and stuck sync
handlers. Over real loopback HTTP against the sandbox (or the stub facilitator where a fault
must be injected); each fault test ends with conservation. #7, #8 and top-up:
``test_owed_and_topup.py``."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from aiohttp import web

from svc_gateway.config import PluginConfig
from svc_gateway.hosts.embedded import DEMO_TOKEN
from svc_gateway.selling.handlers import SyncHandlerPool, default_handler
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.service.pricing import crypto_price, expirable_credits
from tests.support import serve_app, until
from tests.support.fixtures import StubMarketFactory
from tests.support.market import Market, MarketFactory, paid_post, redeemed, scripted_handler
from tests.support.stub_service import StubService, make_token

PAYER = "0x" + "aa" * 20
OTHER_PAYER = "0x" + "dd" * 20


class Gate:
    """An async handler that holds every call until ``size`` calls are inside at once (or a
    few seconds pass), so a test knows its requests were in flight together."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.inside = 0
        self.calls = 0
        self._full: asyncio.Event | None = None

    async def __call__(self, request: dict[str, Any]) -> Any:
        if self._full is None:
            self._full = asyncio.Event()  # created on the loop the handler runs on
        self.calls += 1
        self.inside += 1
        if self.inside >= self.size:
            self._full.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._full.wait(), 5)
        return await default_handler(request)


async def sell_a_time_plan(market: Market) -> None:
    """Register a time plan (one hour of access) and an agent selling it at the endpoint."""
    client = ServiceClient(market.server.base_url, market.builder_key)
    try:
        ids = await client.register_agent_and_plan(
            AgentMetadata(name="Time agent"),
            AgentApi(endpoints=[{"POST": market.endpoint.url}]),
            PlanMetadata(name="One hour"),
            crypto_price([1_000_000], [market.builder_address], DEMO_TOKEN),
            expirable_credits(3600),
        )
    finally:
        await client.aclose()
    market.plan_id, market.agent_id = ids.plan_id, ids.agent_id
    market.endpoint.flow.explicit_plan_id = ids.plan_id
    market.endpoint.flow.explicit_agent_id = ids.agent_id


# -- 1. time plans are not metered -----------------------------------------------------------


async def test_a_time_plan_subscriber_is_served_concurrently_not_metered_as_credits(
    make_market: MarketFactory,
) -> None:
    gate = Gate(4)
    market = await make_market(
        register_agent=False,
        configure_builder=lambda gw: setattr(gw, "agent_handler", gate),
        scripted=False,
    )
    await sell_a_time_plan(market)
    await market.order()
    token = await market.token()
    async with httpx.AsyncClient(timeout=30) as http:
        responses = await asyncio.gather(
            *(
                http.post(
                    market.endpoint.url,
                    json={"prompt": f"q {i}"},
                    headers={"payment-signature": token},
                )
                for i in range(4)
            )
        )
    assert [r.status_code for r in responses] == [200] * 4
    assert gate.calls == 4
    assert all("payment-response" in r.headers for r in responses)  # each access settled
    assert redeemed(responses) == 0  # access to a time plan burns no credits
    assert market.endpoint.stats.settled == 4 and market.endpoint.stats.refused == 0
    assert Counter(r.status_code for r in responses) == {200: 4}


# -- 2. the admission is released on every path ----------------------------------------------


class Stalling:
    """A handler that answers at once, except for the prompt ``stall`` (it waits until it is
    cancelled, and says so) and ``cancel`` (it raises CancelledError itself)."""

    def __init__(self) -> None:
        self.stalling = 0
        self.cancelled = 0

    async def __call__(self, request: dict[str, Any]) -> Any:
        if request["prompt"] == "stall":
            self.stalling += 1
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if request["prompt"] == "cancel":
            raise asyncio.CancelledError
        return await scripted_handler(request)


@contextlib.asynccontextmanager
async def host_app_serving(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` as a host does that cancels a handler when its client goes away."""
    async with serve_app(app, handler_cancellation=True) as origin:
        yield origin


async def give_up_when(request: Awaitable[httpx.Response], condition: Callable[[], bool]) -> None:
    """Send ``request`` and hang up (close the connection) once ``condition`` holds."""
    sending = asyncio.ensure_future(request)
    try:
        await until(condition)
    finally:
        sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending


async def test_a_client_gone_mid_handler_on_a_cancelling_host_does_not_lock_the_payer_out(
    make_stub_market: StubMarketFactory,
) -> None:
    app, handler = web.Application(), Stalling()
    market = await make_stub_market(stub=StubService(balance=1), handler=handler, http_app=app)
    async with host_app_serving(app) as origin, httpx.AsyncClient(timeout=30) as http:
        url = origin + market.url
        await give_up_when(paid_post(http, url, "stall"), lambda: handler.stalling == 1)
        await until(lambda: handler.cancelled == 1)  # the host cancelled the paid work
        after = await paid_post(http, url)
    assert after.status_code == 200, after.text  # one credit, nothing in flight: served
    assert redeemed([after]) == 1
    assert market.stub.burned == 1 and market.stub.calls["settle"] == 1
    assert market.stub.balance_of(PAYER) + market.stub.burned == 1  # conservation


async def test_a_handler_raising_cancelled_error_gets_500_and_releases_its_claim(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=1), handler=Stalling())
    async with httpx.AsyncClient(timeout=30) as http:
        failed = await paid_post(http, market.url, "cancel")
        after = await paid_post(http, market.url)
    assert failed.status_code == 500 and "nothing was charged" in failed.json()["message"]
    assert after.status_code == 200, after.text
    assert market.endpoint.stats.handler_failures == 1
    assert market.stub.burned == 1 and market.stub.balance_of(PAYER) == 0  # conservation


async def test_a_handler_answering_4xx_or_5xx_releases_its_claim(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=1))
    async with httpx.AsyncClient(timeout=30) as http:
        refused = await paid_post(http, market.url, "status:404")
        broken = await paid_post(http, market.url, "status:503")
        after = await paid_post(http, market.url)
    assert (refused.status_code, broken.status_code, after.status_code) == (404, 503, 200)
    assert "payment-response" not in refused.headers and "payment-response" not in broken.headers
    assert market.stub.burned == 1 and market.stub.balance_of(PAYER) == 0  # conservation


async def test_a_client_gone_while_settling_leaves_the_settle_owed_and_paid_once(
    make_stub_market: StubMarketFactory,
) -> None:
    app = web.Application()
    stub = StubService(balance=2)
    market = await make_stub_market(stub=stub, http_app=app)
    flow = market.endpoint.flow
    market.stub.hang_calls.add("settle")
    async with host_app_serving(app) as origin, httpx.AsyncClient(timeout=30) as http:
        url = origin + market.url
        await give_up_when(paid_post(http, url), lambda: stub.calls["settle"] == 1)
        await until(lambda: flow.stats.settle_deferred == 1)
        assert flow.stats.settle_queue == 1
        (owed,) = await flow.settler.queue.entries()
        market.stub.release.set()  # the settle the cancelled request sent lands now
        market.stub.hang_calls.clear()
        assert await flow.seller.runtime.run(flow.settler.drain_queue()) == 1
    assert owed.request_id in market.stub.settled  # retried on its own agentRequestId
    assert market.stub.burned == 1  # once, though two settles were sent for it
    assert flow.stats.settle_queue == 0 and flow.stats.settle_lost == 0
    assert market.stub.balance_of(PAYER) + market.stub.burned == 2  # conservation


# -- 3. a buyer who has gone away is not charged ---------------------------------------------


class Slow:
    """Answers ``slow`` after a pause (async or in a worker thread), anything else at once."""

    def __init__(self) -> None:
        self.finished = 0

    async def __call__(self, request: dict[str, Any]) -> Any:
        if request["prompt"] == "slow":
            await asyncio.sleep(1.0)
        self.finished += 1
        return await default_handler(request)


async def test_an_answer_ready_after_its_client_left_is_not_settled(
    make_stub_market: StubMarketFactory,
) -> None:
    handler = Slow()
    market = await make_stub_market(stub=StubService(balance=5), handler=handler)
    flow = market.endpoint.flow
    async with httpx.AsyncClient(timeout=30) as http:
        with pytest.raises(httpx.ReadTimeout):  # the buyer gives up before the answer
            await http.post(
                market.url,
                json={"prompt": "slow"},
                headers={"payment-signature": make_token(PAYER)},
                timeout=0.3,
            )
        await until(lambda: handler.finished == 1)
        await until(lambda: flow.stats.abandoned == 1)
        assert market.stub.calls["settle"] == 0 and market.stub.burned == 0
        assert flow.book.known("plan-1", PAYER) == (5, 0)  # the claim is released
        after = await paid_post(http, market.url)
    assert after.status_code == 200 and redeemed([after]) == 1
    assert market.stub.balance_of(PAYER) + market.stub.burned == 5  # conservation


def test_the_buyer_waits_at_least_as_long_as_a_seller_of_ours_may_work() -> None:
    config = PluginConfig.model_validate({})
    seller_may_take = (
        config.paid_budget_secs  # plan, balance, verify
        + config.handler_timeout_secs  # the agent's work
        + config.paid_budget_secs  # settling
    )
    assert config.request_timeout_secs >= seller_may_take
    assert (config.request_timeout_secs, config.handler_timeout_secs) == (60.0, 30.0)


# -- 4. sync handlers on their own bounded threads -------------------------------------------


class Blocking:
    """A sync handler: ``stuck`` blocks its thread until released; it notes its threads."""

    def __init__(self) -> None:
        self.unblock = threading.Event()
        self.threads: set[str] = set()

    def __call__(self, request: dict[str, Any]) -> Any:
        self.threads.add(threading.current_thread().name)
        if request["prompt"] == "stuck":
            self.unblock.wait(30)
        return {"answer": request["prompt"]}


async def test_when_every_handler_thread_is_stuck_new_requests_get_503_before_verify(
    make_stub_market: StubMarketFactory,
) -> None:
    handler = Blocking()
    market = await make_stub_market(
        stub=StubService(balance=5), handler=handler, config={"handlerTimeoutSecs": 0.3}
    )
    flow = market.endpoint.flow
    flow.handler_pool = market.endpoint.agent.pool = SyncHandlerPool(workers=2)
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            # two payers (one payer holds at most half the threads: test_fair_share.py)
            slow = await asyncio.gather(
                *(paid_post(http, market.url, "stuck", payer) for payer in (PAYER, OTHER_PAYER))
            )
            assert [r.status_code for r in slow] == [504, 504]  # nothing charged
            assert flow.handler_pool.overdue == 2 and flow.handler_pool.stuck
            verified = market.stub.calls["verify"]
            refused = await paid_post(http, market.url, "a fresh question")
            assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
            assert "nothing was charged" in refused.json()["message"]
            assert market.stub.calls["verify"] == verified  # refused before verify
            handler.unblock.set()  # the stuck threads return
            await until(lambda: flow.handler_pool.overdue == 0)
            after = await paid_post(http, market.url, "now")
    finally:
        handler.unblock.set()
    assert after.status_code == 200 and after.json() == {"answer": "now"}
    assert handler.threads and all(name.startswith("svc-handler") for name in handler.threads)
    assert market.stub.burned == 1 and market.stub.balance_of(PAYER) == 4  # conservation


async def test_a_call_whose_caller_left_before_a_thread_was_free_never_runs() -> None:
    pool = SyncHandlerPool(workers=1)
    gate, ran = threading.Event(), []

    def work(arg: dict[str, Any]) -> str:
        ran.append(arg["prompt"])
        gate.wait(10)
        return str(arg["prompt"])

    first = asyncio.create_task(pool.run(work, {"prompt": "first"}))
    await until(lambda: ran == ["first"])
    queued = asyncio.create_task(pool.run(work, {"prompt": "queued"}))
    await asyncio.sleep(0.05)
    queued.cancel()  # its caller gave up while it waited for the only thread
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert pool.overdue == 0  # it never held a thread
    gate.set()
    assert await first == "first"
    assert await pool.run(work, {"prompt": "next"}) == "next"
    assert ran == ["first", "next"]
    pool.shutdown()
    pool.shutdown()  # idempotent
