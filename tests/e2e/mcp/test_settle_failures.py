"""A paid MCP call whose settle fails after the tool ran: the content is withheld and nothing
is queued; a settle whose reply is lost is asked again on its agentRequestId (burned once)."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from svc_gateway.selling.ways_in.mcp import Options
from tests.conftest import CountingTransport

from .conftest import GRANTED, McpMarketFactory


class SettleOutage(CountingTransport):
    """The service answers everything but settle (connection refused)."""

    async def before(self, method: str, path: str) -> None:
        if path.endswith("/x402/settle"):
            raise aiohttp.ClientConnectionError("settle unreachable")


async def test_unreachable_settle_withholds_the_answer_and_queues_nothing(
    make_mcp_market: McpMarketFactory,
) -> None:
    market = await make_mcp_market(transport=SettleOutage())
    market.server.tool("forecast", lambda _a: "rain", options=Options(credits=3))
    token, meta = await market.payment("forecast")
    async with market.session(token) as session:
        result = await session.call_tool("forecast", {}, meta)
    assert result["isError"] is True
    assert "rain" not in json.dumps(result["content"])
    assert result["structuredContent"]["error"].startswith("settlement failed")
    flow = market.server.flow
    assert flow.settler.queue is None and flow.stats.settle_queue == 0  # no store was even opened
    assert flow.stats.settle_deferred == 0
    assert flow.book.known(market.plan_id, market.subscriber_address) == (GRANTED, 0)
    assert await market.burned() == 0


class LostSettleReply(CountingTransport):
    """The first settle reaches the service (which burns) and its reply never comes back; the
    ones after it are answered."""

    def __init__(self) -> None:
        super().__init__()
        self.settles = 0

    async def _middleware(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        response = await super()._middleware(request, handler)
        if request.url.path.endswith("/x402/settle"):
            self.settles += 1
            if self.settles == 1:
                await response.read()  # the service has answered: the credits are burned
                await asyncio.sleep(3600)  # ...and the answer is lost on the way back
        return response


async def test_a_settle_whose_reply_is_lost_is_asked_again_and_the_content_delivered(
    make_mcp_market: McpMarketFactory,
) -> None:
    """Without a queue, a burned settle whose reply is lost would charge for withheld content:
    each attempt gets half the budget, the retry on the same agentRequestId answers with the
    first one's receipt, the content is delivered, and the credits burn once."""
    transport = LostSettleReply()
    market = await make_mcp_market(transport=transport, config={"paidBudgetSecs": 2})
    market.server.tool("forecast", lambda _a: "rain", options=Options(credits=3))
    token, meta = await market.payment("forecast")
    async with market.session(token) as session:
        result = await session.call_tool("forecast", {}, meta)
    assert not result.get("isError"), result
    assert result["content"][0]["text"] == "rain"
    receipt = result["_meta"]["x402/payment-response"]
    assert receipt["success"] is True and receipt["creditsRedeemed"] == "3"
    assert transport.settles == 2  # asked once more, on the same agentRequestId
    assert await market.burned() == 3  # granted = balance + burned: burned once, not twice
    flow = market.server.flow
    assert flow.stats.settled == 1 and flow.stats.settle_failures == 0
    assert flow.book.known(market.plan_id, market.subscriber_address) == (GRANTED - 3, 0)


class SettleNeverAnswers(CountingTransport):
    """Every settle hangs (the service never answers it, and never burns)."""

    async def before(self, method: str, path: str) -> None:
        if path.endswith("/x402/settle"):
            await asyncio.sleep(3600)


async def test_a_settle_that_never_answers_withholds_the_content_within_the_budget(
    make_mcp_market: McpMarketFactory,
) -> None:
    transport = SettleNeverAnswers()
    market = await make_mcp_market(transport=transport, config={"paidBudgetSecs": 2})
    market.server.tool("forecast", lambda _a: "rain", options=Options(credits=3))
    token, meta = await market.payment("forecast")
    async with market.session(token) as session:
        result = await session.call_tool("forecast", {}, meta)
    assert result["isError"] is True and "rain" not in json.dumps(result)
    assert transport.count("POST", "/x402/settle") >= 2  # half the budget each, then given up
    flow = market.server.flow
    assert flow.settler.queue is None and flow.stats.settle_queue == 0  # no store was even opened
    assert flow.book.known(market.plan_id, market.subscriber_address) == (GRANTED, 0)
    assert await market.burned() == 0
