"""Conservation under load against the sandbox: 200 concurrent paid requests against credits
for 150 (no duration is asserted; speed is measured by the benchmarks)."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx

from svc_gateway.encoding import decode_b64_json
from svc_gateway.service.client import ServiceClient
from tests.support.fixtures import no_top_up
from tests.support.market import MarketFactory

REQUESTS = 200
CREDITS = 150


async def test_200_concurrent_requests_with_credits_for_150(make_market: MarketFactory) -> None:
    market = await make_market(credits=CREDITS, per_request=1, subscriber_config=no_top_up)
    await market.order()
    token = await market.token()
    observer = ServiceClient(market.server.base_url)
    samples: list[int] = []
    done = asyncio.Event()

    async def watch_balance() -> None:
        while not done.is_set():
            balance = await observer.get_plan_balance(market.plan_id, market.subscriber_address)
            samples.append(balance.balance)
            await asyncio.sleep(0.02)

    limits = httpx.Limits(max_connections=20, max_keepalive_connections=20)
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:
        watcher = asyncio.create_task(watch_balance())
        responses = await asyncio.gather(
            *(
                http.post(
                    market.endpoint.url,
                    json={"prompt": f"question {i}"},
                    headers={"payment-signature": token},
                )
                for i in range(REQUESTS)
            )
        )
        done.set()
        await watcher
    try:
        final = (await observer.get_plan_balance(market.plan_id, market.subscriber_address)).balance
    finally:
        await observer.aclose()

    assert Counter(r.status_code for r in responses) == {200: CREDITS, 402: REQUESTS - CREDITS}
    receipts = [decode_b64_json(r.headers.get("payment-response")) for r in responses]
    paid = [r for r in receipts if r is not None]
    assert len(paid) == CREDITS
    assert all(r["creditsRedeemed"] == "1" and r["success"] for r in paid)
    # every burn left a distinct balance behind: no two settles burned the same credit
    assert sorted(int(r["remainingBalance"]) for r in paid) == list(range(CREDITS))
    refused = [r.json()["reason"] for r in responses if r.status_code == 402]
    assert all("insufficient credits" in reason for reason in refused)
    assert final == 0
    assert samples and min(samples) >= 0
    burned = CREDITS - final
    answered = sum(1 for r in responses if r.status_code == 200)
    assert burned == answered * 1 == market.endpoint.stats.credits_settled
