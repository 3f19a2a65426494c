"""Issue 16 #7 and #8 and issue 15 (seller): settles owed across a restart, retried on their
own ``agentRequestId``, one journal per endpoint, and a payer whose delegation tops up at
settle. Over loopback against the sandbox or the stub facilitator; each ends with
conservation (granted = balance + burned)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from svc_gateway import register
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.config import ConfigError
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.selling.handlers import default_handler
from svc_gateway.selling.state.settle_journal import SettleJournal
from tests.support.fixtures import StubMarketFactory, no_top_up
from tests.support.market import (
    OWN_KEY_REJECTED,
    MarketFactory,
    answer_lost_500,
    paid_post,
    redeemed,
    refuse_500,
    scripted_handler,
)
from tests.support.stub_service import StubService

PAYER = "0x" + "aa" * 20


# -- 7. after a restart, settles still owed are credits in flight ----------------------------


async def test_after_a_restart_6_credits_do_not_buy_9_answers(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = StubService(balance=6)
    first = await make_stub_market(stub=stub, store_dir="seller")
    stub.faults["settle"] = OWN_KEY_REJECTED  # not the payer's fault: answers delivered, queued
    async with httpx.AsyncClient(timeout=30) as http:
        before = [await paid_post(http, first.url, f"q{i}") for i in range(3)]
        assert [r.status_code for r in before] == [200] * 3
        assert first.endpoint.stats.settle_queue == 3
        await asyncio.to_thread(first.handle.close)  # the seller restarts, the outage goes on
        second = await make_stub_market(stub=stub, store_dir="seller")
        flow = second.endpoint.flow
        assert flow.stats.settle_queue == 3
        assert flow.book.known("plan-1", PAYER) == (0, 3)  # owed: in flight before any read
        after = [await paid_post(http, second.url, f"r{i}") for i in range(6)]
    statuses = Counter(r.status_code for r in after)
    assert statuses == {200: 3, 402: 3}  # 6 credits, 3 of them owed: 3 more answers
    del stub.faults["settle"]
    for _ in range(50):  # bounded
        if not flow.stats.settle_queue:
            break
        await flow.seller.runtime.run(flow.settler.drain_queue())
    assert flow.stats.settle_queue == 0 and flow.stats.settle_lost == 0
    assert flow.stats.settle_recovered == 6  # every delivered answer paid, from the queue
    assert stub.burned == 6 and stub.balance_of(PAYER) == 0  # conservation: 6 = 0 + 6
    assert flow.book.known("plan-1", PAYER) == (0, 0)


# -- 8. a queued settle is retried with its original agentRequestId --------------------------


async def test_a_queued_settle_is_retried_on_its_own_agent_request_id_and_charged_once(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    market = await make_market(faults=True)  # 10 credits, 2 per request, the real sandbox
    flow = market.endpoint.flow
    flow.settler.backoff = (0.0, 0.0)
    await market.order()
    assert market.transport is not None
    # the first settle burns but its answer is lost; the in-flow retries find the service down
    market.transport.faults["x402/settle"] = [answer_lost_500, refuse_500, refuse_500]
    token = await market.token()
    response = await http.post(
        market.endpoint.url, json={"prompt": "pay once"}, headers={"payment-signature": token}
    )
    assert response.status_code == 200 and "payment-response" not in response.headers
    assert flow.stats.settle_queue == 1 and await market.balance() == 8  # burned once already
    (owed,) = await flow.settler.queue.entries()
    assert await flow.seller.runtime.run(flow.settler.drain_queue()) == 1
    assert market.transport.calls["x402/settle"] == 4
    receipt = flow.stats.receipts[-1]
    assert receipt["creditsRedeemed"] == "2" and receipt["remainingBalance"] == "8"
    balance = await market.balance()
    assert balance == 8  # the v2 token was charged once for its one answer
    assert flow.stats.settle_recovered == 1 and flow.stats.settle_queue == 0
    assert owed.request_id not in flow.settler.queue
    assert balance + int(receipt["creditsRedeemed"]) == 10  # conservation


# -- the settle journal is the flow's store: one endpoint per queue file ---------------------


async def test_a_second_endpoint_on_the_same_queue_file_refuses_to_start(
    make_stub_market: StubMarketFactory,
) -> None:
    first = await make_stub_market(store_dir="one-dir")
    assert isinstance(first.endpoint.flow.settler.queue, SettleJournal)
    with pytest.raises(ConfigError, match="already in use by process"):
        await make_stub_market(stub=first.stub, store_dir="one-dir")


# -- issue 15: a payer whose delegation tops up at settle ------------------------------------


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, request: dict[str, Any]) -> Any:
        self.calls += 1
        await asyncio.sleep(0.05)  # long enough for the requests of a wave to overlap
        return await default_handler(request)


async def test_a_payer_with_0_credits_is_served_as_often_as_the_delegation_can_pay(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    handler = Counting()
    market = await make_market(
        credits=2,  # one order of the plan: 2 credits for 1 USDC (100 cents)
        per_request=1,
        configure_builder=lambda gw: setattr(gw, "agent_handler", handler),
        scripted=False,
        subscriber_config=lambda _m: {"defaultSpendingLimitCents": 300},  # three orders
    )
    token = await market.token()  # never ordered: 0 credits, a delegation behind the token
    assert await market.balance() == 0
    responses: list[httpx.Response] = []
    for _wave in range(20):  # bounded: concurrent waves until the delegation is spent
        wave = await asyncio.gather(
            *(
                http.post(
                    market.endpoint.url,
                    json={"prompt": f"question {len(responses) + i}"},
                    headers={"payment-signature": token},
                )
                for i in range(4)
            )
        )
        responses.extend(wave)
        if all("cannot be ordered" in r.json().get("reason", "") for r in wave):
            break
    else:
        raise AssertionError("the delegation was never spent")
    answered = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 402]
    assert len(answered) + len(refused) == len(responses)
    assert len(answered) == 6  # 3 orders of 2 credits, 1 credit per answer
    assert all("payment-response" in r.headers for r in answered)  # no answer unpaid
    assert handler.calls == 6  # and no work done for a request that could not pay
    assert market.endpoint.stats.settle_refused == 0
    plan = (await http.get(f"{market.server.base_url}/protocol/plans/{market.plan_id}")).json()
    granted = int(plan["ordersCount"]) * 2  # every credit came from a top-up order
    balance, burned = await market.balance(), redeemed(answered)
    assert (granted, balance, burned) == (6, 0, 6)
    assert granted == balance + burned  # conservation


async def test_a_seller_restarted_during_a_settle_outage_sells_no_owed_credit_twice(
    make_market: MarketFactory, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """Against the sandbox: 6 credits, 3 answers delivered while settle is down, the seller
    restarts on the same config directory, the outage goes on: 3 more answers, not 6."""
    market = await make_market(credits=6, per_request=1, faults=True, subscriber_config=no_top_up)
    await market.order()
    token = await market.token()
    assert market.transport is not None
    market.transport.always["x402/settle"] = refuse_500  # the outage

    async def ask(url: str, n: int) -> list[httpx.Response]:
        headers = {"payment-signature": token}
        return [await http.post(url, json={"prompt": f"q{i}"}, headers=headers) for i in range(n)]

    before = await ask(market.endpoint.url, 3)
    assert [r.status_code for r in before] == [200] * 3
    assert market.endpoint.stats.settle_queue == 3
    config = dict(market.builder_gw.plugin_config)
    await asyncio.to_thread(market.builder.close)  # the seller restarts
    gateway = ReferenceGateway(
        {**config, "planId": market.plan_id, "agentId": market.agent_id, "paidEndpointPort": 0}
    )
    gateway.agent_handler = scripted_handler  # type: ignore[attr-defined]
    restarted = await asyncio.to_thread(
        register, gateway, store=CredentialStore(tmp_path / "b0", use_keyring=False)
    )
    try:
        endpoint = restarted.extras["paid_endpoint"]
        flow = endpoint.flow
        assert flow.stats.settle_queue == 3  # the journal of the first run
        after = await ask(endpoint.url, 6)
        assert Counter(r.status_code for r in after) == {200: 3, 402: 3}
        del market.transport.always["x402/settle"]  # the service is back
        for _ in range(50):  # bounded
            if not flow.stats.settle_queue:
                break
            await flow.seller.runtime.run(flow.settler.drain_queue())
        stats = flow.stats
        assert (stats.settle_queue, stats.settle_lost, stats.settle_recovered) == (0, 0, 6)
        burned = sum(int(r["creditsRedeemed"]) for r in stats.receipts)
    finally:
        await asyncio.to_thread(restarted.close)
    balance = await market.balance()
    assert (balance, burned) == (0, 6)  # every delivered answer paid once, none given away
    assert balance + burned == 6  # conservation
