"""svc_queryAgent against the real paid endpoint, and against small fake agents on loopback
for what a well-behaved endpoint never does (a foreign card, a huge or slow answer)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from svc_gateway.tools.query import is_loopback_host

from .support import Market, MarketFactory

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class FakeAgent:
    url: str
    posts: list[str] = field(default_factory=list)


async def _ok(request: web.Request) -> web.StreamResponse:
    return web.json_response({"answer": "fake"})


@asynccontextmanager
async def fake_agent(card: dict[str, Any] | None, answer: Answer = _ok) -> AsyncIterator[FakeAgent]:
    """An agent on 127.0.0.1 serving ``card`` (if any) and answering POSTs with ``answer``."""
    app = web.Application()
    agent = FakeAgent(url="")

    async def card_route(request: web.Request) -> web.StreamResponse:
        return web.json_response(card)

    async def post(request: web.Request) -> web.StreamResponse:
        agent.posts.append(request.path)
        return await answer(request)

    if card is not None:
        app.router.add_get("/agent/.well-known/agent.json", card_route)
    app.router.add_post("/agent", post)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    agent.url = f"http://127.0.0.1:{runner.addresses[0][1]}/agent"
    try:
        yield agent
    finally:
        await runner.cleanup()


def good_card(market: Market) -> dict[str, Any]:
    return {"agentId": market.agent_id, "planId": market.plan_id, "schemes": ["svc:erc4337"]}


async def query(market: Market, agent_url: str, **extra: Any) -> tuple[bool, dict[str, Any]]:
    params = {"agentUrl": agent_url, "prompt": "how many words here", "planId": market.plan_id}
    result = await market.subscriber_gw.call_tool("svc_queryAgent", {**params, **extra})
    return result.isError, result.structuredContent


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback_host(host), host
    for other in ("10.0.0.1", "192.168.1.2", "example.com", "localhost.example.com", "", None):
        assert not is_loopback_host(other), other


@pytest.mark.parametrize(
    "url", ["http://agent.example.com/svc/agent", "http://10.1.2.3:8402/svc/agent"]
)
async def test_refuses_plain_http_to_a_remote_host(market: Market, url: str) -> None:
    await market.order()
    failed, data = await query(market, url)
    assert failed
    assert data["error"]["code"] == "insecure_agent_url"
    assert "https" in data["error"]["hint"]
    assert await market.balance() == 10


async def test_answer_and_receipt_from_the_real_endpoint(market: Market) -> None:
    await market.order()
    failed, data = await query(market, market.endpoint.url)  # no agentId: taken from the card
    assert not failed, data
    assert data["answer"]["wordCount"] == 4
    assert data["agentId"] == market.agent_id
    receipt = data["receipt"]
    assert receipt["success"] is True
    assert receipt["creditsRedeemed"] == "2"
    assert receipt["remainingBalance"] == "8"
    assert receipt["transaction"]
    assert "warnings" not in data
    assert await market.balance() == 8


async def test_a_402_becomes_guidance(market: Market) -> None:
    failed, data = await query(market, market.endpoint.url, agentId=market.agent_id)
    assert failed
    error = data["error"]
    assert error["code"] == "payment_required"
    assert "insufficient credits" in error["message"]
    assert market.plan_id in error["hint"] and "svc_orderPlan" in error["hint"]


async def test_refuses_a_card_for_another_agent_and_does_not_pay(market: Market) -> None:
    await market.order()
    card = {**good_card(market), "agentId": "did:svc:someone-else"}
    async with fake_agent(card) as agent:
        failed, data = await query(market, agent.url, agentId=market.agent_id)
    assert failed
    assert data["error"]["code"] == "agent_mismatch"
    assert "did:svc:someone-else" in data["error"]["message"]
    assert agent.posts == []
    assert await market.balance() == 10


async def test_refuses_a_card_without_the_plans_scheme(market: Market) -> None:
    await market.order()
    card = {**good_card(market), "schemes": ["svc:card-delegation"]}
    async with fake_agent(card) as agent:
        failed, data = await query(market, agent.url)
    assert failed and data["error"]["code"] == "scheme_not_accepted"
    assert agent.posts == []


async def test_no_card_is_a_warning_and_text_answers_are_returned(market: Market) -> None:
    async def text(request: web.Request) -> web.StreamResponse:
        return web.Response(text="plain words", content_type="text/plain")

    async with fake_agent(None, text) as agent:
        failed, data = await query(market, agent.url, agentId=market.agent_id)
    assert not failed, data
    assert data["answer"] == "plain words"
    assert data["receipt"] is None
    assert any("No agent card" in w for w in data["warnings"])
    assert any("no payment receipt" in w for w in data["warnings"])


async def test_an_oversized_answer_is_cut_off(market: Market) -> None:
    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for _ in range(40):  # 2.5 MiB, no Content-Length: the reader must stop by itself
            await response.write(b" " * 65536)
        await response.write_eof()
        return response

    async with fake_agent(good_card(market), huge) as agent:
        failed, data = await query(market, agent.url)
    assert failed and data["error"]["code"] == "answer_too_large"


async def test_a_slow_agent_times_out(make_market: MarketFactory) -> None:
    market = await make_market(subscriber_config=lambda m: {"requestTimeoutSecs": 0.5})

    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(3)
        return web.json_response({})

    async with fake_agent(good_card(market), slow) as agent:
        failed, data = await query(market, agent.url)
    assert failed and data["error"]["code"] == "agent_timeout"


async def test_spending_invalidates_the_balance_context(make_market: MarketFactory) -> None:
    market = await make_market(subscriber_config=lambda m: {"planId": m.plan_id})
    await market.order()
    assert ": 10 credits" in await market.subscriber_gw.context_text()
    failed, data = await query(market, market.endpoint.url)
    assert not failed, data
    # within the 60 s TTL: only the invalidation after spending can explain the new number
    assert ": 8 credits" in await market.subscriber_gw.context_text()
