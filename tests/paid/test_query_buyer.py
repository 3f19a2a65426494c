"""svc_queryAgent from the buyer's side, end to end against the sandbox: which agent is paid
when none is named (issue 14, P15), what a buyer is told after an agent took the payment and
gave no answer (issue 16 #9), and the delegation the tools create (issue 16 #12)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .support import MarketFactory
from .test_query import fake_agent, query, registered_fake


async def test_an_unregistered_url_without_agent_id_does_not_fall_back_to_the_configured_agent(
    make_market: MarketFactory,
) -> None:
    market = await make_market(subscriber_config=lambda m: {"agentId": m.agent_id})
    await market.order()
    async with fake_agent(None) as stranger:  # no card, never registered
        failed, data = await query(market, stranger.url)
        assert stranger.posts == [] and stranger.tokens == []
    assert failed
    error = data["error"]
    assert error["code"] == "unknown_agent"
    assert stranger.url in error["message"]
    assert market.agent_id not in error["message"] + error["hint"]
    assert "agentId" in error["hint"] and "agentUrl" in error["hint"]
    assert await market.balance() == 10


async def test_the_configured_agent_is_paid_at_its_own_registered_url_without_a_card(
    make_market: MarketFactory,
) -> None:
    async def answer(request: web.Request) -> web.StreamResponse:
        return web.json_response({"answer": "from the configured agent"})

    async with registered_fake(make_market, answer, card=False) as (market, agent):
        # the agent is registered after the subscriber started: set what config agentId sets
        market.subscriber.core.agent_id = market.agent_id
        failed, data = await query(market, agent.url, planId=None)
    assert not failed, data
    assert data["agentId"] == market.agent_id
    answer_: Any = data["answer"]
    assert answer_ == {"answer": "from the configured agent"}
