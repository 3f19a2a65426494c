"""Issue 16, the seller's items: time plans, cancellations, disconnects, stuck sync handlers,
restarts with queued settles. Over real loopback HTTP against the sandbox (or the stub
facilitator where a fault must be injected); each fault test ends with conservation."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

import httpx

from svc_gateway.client import ServiceClient
from svc_gateway.embedded import DEMO_TOKEN
from svc_gateway.encoding import decode_b64_json
from svc_gateway.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.paid.handlers import default_handler
from svc_gateway.pricing import crypto_price, expirable_credits

from .support import Market, MarketFactory


def redeemed(responses: list[httpx.Response]) -> int:
    """Credits burned, as the receipts the buyer holds say."""
    total = 0
    for response in responses:
        receipt = decode_b64_json(response.headers.get("payment-response"))
        if receipt is not None:
            total += int(receipt["creditsRedeemed"])
    return total


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
