"""Two sellers (different builders, different plans) on one Redis never touch each other's
state: each one's book, settle queue and counters live in its own namespace, a seller never
leases a settle it cannot make, and a settle "only the owner" may make is left for its owner,
never counted lost. Real redis-server, the local sandbox over loopback HTTP, conservation
checked on its ledger."""

from __future__ import annotations

from pathlib import Path

import httpx
from aiohttp import web

from svc_gateway.selling import PAYMENTS, RouteConfig, build_payment_app
from svc_gateway.selling.ways_in.middleware import PaymentMiddleware
from tests.support.market import FaultProxy, refuse_500
from tests.support.redis_server import RedisServer
from tests.support.sellers import Seller, SellerFactory, make_seller_fixture  # noqa: F401

from .test_middleware_redis import served

ROUTE = "/runs/wait"


def seller_app(seller: Seller, state_url: str, spool: Path, base_url: str) -> web.Application:
    """The seller's app selling ``POST /runs/wait`` on its fixed plan (2 credits), its
    service calls through ``base_url``."""
    route = RouteConfig(plan_id=seller.fixed_plan, agent_id=seller.fixed_agent)
    settings = seller.settings(stateUrl=state_url, settleQueuePath=str(spool), baseUrl=base_url)
    app = build_payment_app({f"POST {ROUTE}": route}, settings)

    async def run_wait(request: web.Request) -> web.Response:
        return web.json_response({"echo": await request.json()})

    app.router.add_post(ROUTE, run_wait)
    return app


async def conserved(seller: Seller, burned: int) -> None:
    ledger = await seller.ledger(seller.fixed_plan)
    assert ledger["burned"] == burned
    assert ledger["granted"] == ledger["balance"] + ledger["burned"]  # conservation


async def owe_three(seller: Seller, origin: str) -> None:
    """Three paid answers delivered while the seller's settle is down: owed, queued."""
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(timeout=30) as http:
        for n in range(3):
            answer = await http.post(
                origin + ROUTE, json={"n": n}, headers={"payment-signature": token}
            )
            assert answer.status_code == 200 and "payment-response" not in answer.headers


async def test_two_sellers_on_one_redis_never_take_each_others_settles_or_counts(
    make_seller: SellerFactory, redis_server: RedisServer, tmp_path: Path
) -> None:
    a: Seller = await make_seller()
    b: Seller = await make_seller()
    proxy = FaultProxy(a.sandbox.origin)
    await proxy.start()
    proxy.always["x402/settle"] = refuse_500  # seller A's settle is down
    app_a = seller_app(a, redis_server.url, tmp_path / "a.json", proxy.base_url)
    app_b = seller_app(b, redis_server.url, tmp_path / "b.json", b.sandbox.base_url)
    try:
        async with served(app_a) as origin_a, served(app_b):
            mw_a: PaymentMiddleware = app_a[PAYMENTS]
            mw_b: PaymentMiddleware = app_b[PAYMENTS]
            mw_a.flow.settler.queue_retry_secs = 3600.0  # A retries only when told to, below
            mw_a.flow.settler.backoff = (0.0, 0.0)
            await owe_three(a, origin_a)
            assert mw_a.shared is not None and mw_b.shared is not None
            assert await mw_a.shared.store.count() == 3
            # B drains its queue: it sees none of A's owed settles, takes none, loses none
            assert await mw_b.shared.store.count() == 0
            assert await mw_b.flow.settler.drain_queue() == 0
            assert mw_b.stats.settle_lost == 0 and mw_b.stats.settled == 0
            # the counters are each seller's own
            await mw_a.shared.stats.push(mw_a.stats)
            await mw_b.shared.stats.push(mw_b.stats)
            assert (await mw_a.shared.stats.totals())["settle_deferred"] == 3
            assert "settle_deferred" not in await mw_b.shared.stats.totals()
            # A's settle is back: A settles every one of its owed answers
            del proxy.always["x402/settle"]
            assert await mw_a.flow.settler.drain_queue() == 3
            assert mw_a.stats.settle_recovered == 3 and mw_a.stats.settle_lost == 0
            assert await mw_a.shared.store.count() == 0
    finally:
        await proxy.close()
    await conserved(a, 6)  # A's payer paid 3 answers of 2 credits
    await conserved(b, 0)


async def test_a_settle_only_its_owner_may_make_is_left_for_the_owner_not_lost(
    make_seller: SellerFactory, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Should one of A's owed settles reach B's queue anyway, B's settle is refused 403 "only
    the owner": B leaves it in the queue and counts nothing lost; A still settles it."""
    a: Seller = await make_seller()
    b: Seller = await make_seller()
    proxy = FaultProxy(a.sandbox.origin)
    await proxy.start()
    proxy.always["x402/settle"] = refuse_500
    app_a = seller_app(a, redis_server.url, tmp_path / "a.json", proxy.base_url)
    app_b = seller_app(b, redis_server.url, tmp_path / "b.json", b.sandbox.base_url)
    try:
        async with served(app_a) as origin_a, served(app_b):
            mw_a: PaymentMiddleware = app_a[PAYMENTS]
            mw_b: PaymentMiddleware = app_b[PAYMENTS]
            mw_a.flow.settler.queue_retry_secs = 3600.0
            mw_a.flow.settler.backoff = (0.0, 0.0)
            await owe_three(a, origin_a)
            assert mw_a.shared is not None and mw_b.shared is not None
            owed = await mw_a.shared.store.entries()
            await mw_b.shared.store.add(owed[0])  # A's entry, in B's queue
            assert await mw_b.flow.settler.drain_queue() == 0
            assert mw_b.stats.settle_lost == 0  # not B's: never "lost"
            assert [e.request_id for e in await mw_b.shared.store.entries()] == [
                owed[0].request_id
            ]  # left for its owner
            del proxy.always["x402/settle"]
            assert await mw_a.flow.settler.drain_queue() == 3 and mw_a.stats.settle_lost == 0
    finally:
        await proxy.close()
    await conserved(a, 6)
    await conserved(b, 0)
