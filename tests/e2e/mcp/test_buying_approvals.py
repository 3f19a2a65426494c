"""Issue 25 over MCP: a paid tool call under approval "human" asks the person (nothing minted,
nothing burned) until they approve its code, which runs the call once; within a mandate it
pays. The sandbox's ledger is the truth."""

from __future__ import annotations

from typing import Any

from tests.helpers import approve

from .conftest import GRANTED, BuyerFactory, McpMarket
from .test_buying import sell_forecast


async def test_an_mcp_call_asks_then_runs_once_on_the_code_and_pays_within_a_mandate(
    mcp_market: McpMarket, make_buyer: BuyerFactory
) -> None:
    calls: list[dict[str, Any]] = []
    sell_forecast(mcp_market, calls)
    buyer = await make_buyer(mcp_market, approval="human")
    params = {"agentUrl": mcp_market.url, "tool": "forecast", "arguments": {"city": "Lima"}}
    asked = (await buyer.call_tool("svc_queryAgent", params)).structuredContent
    assert asked["approvalRequired"] is True and asked["pending"]["kind"] == "query"
    assert calls == [] and await mcp_market.burned() == 0
    reply = await approve(buyer, asked["pending"]["code"])
    assert reply.startswith("Approved: agent") and "sunny" in reply, reply
    assert calls == [{"city": "Lima"}] and await mcp_market.burned() == 2
    assert (await approve(buyer, asked["pending"]["code"])).startswith("No ")
    assert (await buyer.run_command("svc_allow", "1 USD per day")).startswith("Allowed")
    paid = (await buyer.call_tool("svc_queryAgent", params)).structuredContent
    assert paid["answer"] == {"city": "Lima", "forecast": "sunny"}
    assert paid["balanceAfter"] == str(GRANTED - 4) and await mcp_market.burned() == 4
