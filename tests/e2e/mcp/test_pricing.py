"""A tool priced from its result, driven by the official MCP client against the sandbox:
authorize, then capture. What is settled never exceeds what was verified and claimed, never
leaves the plan's [minAmount, maxAmount], and a ceiling above the plan's is refused when the
tool is registered (conservation checked on the sandbox's ledger)."""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
import httpx
import pytest

from svc_gateway.config import ConfigError
from svc_gateway.interop.mcp_sdk import MISCONFIGURATION_CODE, RpcError
from svc_gateway.selling.ways_in.mcp import Options, create_server, serve
from tests.conftest import CountingTransport

from .conftest import GRANTED, McpMarket, McpMarketFactory


class SettleAmounts(CountingTransport):
    """The plugin's client over real HTTP, recording the ``maxAmount`` each settle asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    async def _middleware(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        if request.url.path.endswith("/x402/settle"):
            body = getattr(request.body, "_value", b"")  # the JSON bytes the client sends
            self.asked.append(json.loads(bytes(body))["maxAmount"])
        return await super()._middleware(request, handler)


def days(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"days": [f"day {i}" for i in range(int(arguments["n"]))]}


def per_day(context: dict[str, Any]) -> int:
    return len(context["result"]["days"])


async def ledger(market: McpMarket) -> dict[str, int]:
    async with httpx.AsyncClient(base_url=market.sandbox.base_url) as http:
        answer = await http.get(f"/sandbox/ledger/{market.plan_id}/{market.subscriber_address}")
    data = answer.json()
    return {k: int(data[k]) for k in ("granted", "burned", "balance")}


async def conserved(market: McpMarket, burned: int) -> None:
    books = await ledger(market)
    assert books["burned"] == burned
    assert books["granted"] == books["balance"] + books["burned"] == GRANTED  # conservation


async def test_a_result_priced_above_the_verified_ceiling_settles_the_ceiling(
    mcp_market: McpMarket, caplog: pytest.LogCaptureFixture
) -> None:
    mcp_market.server.tool("outlook", days, options=Options(credits=per_day, max_amount=3))
    async with mcp_market.session("session") as session:
        listed = {t["name"]: t for t in await session.list_tools()}
        _token, meta = await mcp_market.payment("outlook")
        with caplog.at_level(logging.WARNING, logger="svc_gateway.paid"):
            result = await session.call_tool("outlook", {"n": 9}, meta)
    assert listed["outlook"]["_meta"]["svc/price"]["maxAmount"] == "3"  # what was advertised
    assert len(result["structuredContent"]["days"]) == 9
    assert result["_meta"]["x402/payment-response"]["creditsRedeemed"] == "3"
    assert "above the 3 verified" in caplog.text
    await conserved(mcp_market, 3)


async def test_a_result_priced_above_the_plans_max_settles_the_plans_max(
    mcp_market: McpMarket,
) -> None:
    """The plan charges 1..10 per request; asked for more, the service would charge its
    minimum (1), so the amount asked for is kept inside the plan's range: 10."""
    mcp_market.server.tool("outlook", days, options=Options(credits=per_day, max_amount=10))
    token, meta = await mcp_market.payment("outlook")
    async with mcp_market.session(token) as session:
        result = await session.call_tool("outlook", {"n": 15}, meta)
    assert result["_meta"]["x402/payment-response"]["creditsRedeemed"] == "10"
    await conserved(mcp_market, 10)


async def test_the_amount_asked_at_settle_stays_inside_the_plans_range(
    make_mcp_market: McpMarketFactory,
) -> None:
    """Plan 2..10 per request: a result priced 1 asks for 2, one priced 15 asks for 10 (an
    amount outside the range would be charged the plan's minimum by the service)."""
    amounts = SettleAmounts()
    market = await make_mcp_market(min_credits=2, max_credits=10, transport=amounts)
    market.server.tool("outlook", days, options=Options(credits=per_day, max_amount=10))
    for n in (1, 15):
        token, meta = await market.payment("outlook")
        async with market.session(token) as session:
            result = await session.call_tool("outlook", {"n": n}, meta)
        assert not result.get("isError"), result
    assert amounts.asked == ["2", "10"]
    await conserved(market, 12)


async def test_a_max_amount_above_the_plans_max_is_refused_at_registration(
    make_mcp_market: McpMarketFactory,
) -> None:
    market = await make_mcp_market(max_credits=10)
    # the running server read its plan when it started: checked as the tool is registered
    with pytest.raises(ConfigError, match="maxAmount 11 is above the 10"):
        market.server.tool("outlook", days, options=Options(credits=per_day, max_amount=11))
    market.server.tool("fine", days, options=Options(credits=per_day, max_amount=10))
    # registered before its server started (the plan not read yet): refused when it starts
    early = create_server(market.handle.core, server_name="early")
    early.tool("outlook", days, options=Options(credits=per_day, max_amount=11))
    with pytest.raises(ConfigError, match="maxAmount 11"):
        await market.handle.runtime.run(serve(early, host="127.0.0.1", port=0))
    await conserved(market, 0)


async def test_a_call_of_a_tool_over_the_plans_max_is_refused_uncharged(
    make_mcp_market: McpMarketFactory,
) -> None:
    """A tool registered while its plan could not be read is refused at call time, once the
    plan is known, instead of being sold with a ceiling the plan cannot charge."""
    market = await make_mcp_market(max_credits=10)
    market.server.flow.facts_cache.invalidate()  # as if the plan could not be read so far
    market.server.tool("outlook", days, options=Options(credits=per_day, max_amount=11))
    await market.handle.runtime.run(market.server.flow.facts(market.plan_id))  # read now
    token, meta = await market.payment("outlook")
    async with market.session(token) as session:
        with pytest.raises(RpcError) as refused:
            await session.call_tool("outlook", {"n": 2}, meta)
    assert refused.value.code == MISCONFIGURATION_CODE
    assert "nothing was charged" in refused.value.message
    await conserved(market, 0)
