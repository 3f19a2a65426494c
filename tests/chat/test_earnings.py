"""``/svc_earnings`` counts what a gateway sold, never what it bought (issue 26 #1): the seller of
the two-gateway recipe sees its endpoint's sale and the payer; the buyer sees its purchase in
``/svc_spend`` only; replicas sharing ``stateUrl`` each count the sales of all."""

from __future__ import annotations

import httpx

from tests.support.fixtures import StubMarketFactory
from tests.support.market import MarketFactory
from tests.support.redis_server import RedisServer
from tests.support.stub_service import StubService, make_token

PAYER = "0x" + "cd" * 20


async def test_the_seller_earns_the_sale_and_the_buyer_only_spends(
    make_market: MarketFactory,
) -> None:
    market = await make_market(per_request=2)
    await market.order()
    result = await market.subscriber_gw.call_tool(
        "svc_queryAgent",
        {"agentUrl": market.endpoint.url, "prompt": "hello there", "planId": market.plan_id},
    )
    assert not result.isError, result.structuredContent

    earned = await market.builder_gw.run_command("svc_earnings")
    assert earned.startswith("Earned 2 credits settled, 0 queued"), earned
    assert "over 1 sale " in earned
    assert "- paid endpoint: 1 sale, 2 credits settled" in earned
    assert f"{market.subscriber_address.lower()}: 1 sale, 2 settled" in earned.lower()

    bought = await market.subscriber_gw.run_command("svc_earnings")
    assert bought.startswith("The gateway has sold nothing yet"), bought
    spent = await market.subscriber_gw.run_command("svc_spend")
    assert spent.startswith("You paid 2 credits (0.20 USD) for 1 call "), spent
    assert "paid for nothing" in await market.builder_gw.run_command("svc_spend")


async def test_replicas_on_one_state_url_each_count_every_replicas_sales(
    make_stub_market: StubMarketFactory, redis_server: RedisServer
) -> None:
    stub = StubService(balance=100)
    one = await make_stub_market(stub=stub, config={"stateUrl": redis_server.url}, store_dir="1")
    two = await make_stub_market(stub=stub, config={"stateUrl": redis_server.url}, store_dir="2")
    async with httpx.AsyncClient(timeout=30) as http:
        for market, n in ((one, 3), (two, 5)):
            for i in range(n):
                answer = await http.post(
                    market.url,
                    json={"prompt": f"q{i}"},
                    headers={"payment-signature": make_token(PAYER)},
                )
                assert answer.status_code == 200, answer.text
    for market in (one, two):  # what each pushes about once a second, now
        shared = market.endpoint.shared
        assert shared is not None
        await market.endpoint.flow.seller.runtime.run(shared.stats.push(market.endpoint.stats))
    for market in (one, two):
        earned = await market.gateway.run_command("svc_earnings")
        assert "over 8 sales" in earned, earned
        assert "- paid endpoint: 8 sales" in earned and "all replicas on stateUrl" in earned
