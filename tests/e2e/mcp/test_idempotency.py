"""Retries never pay twice on an MCP tool (issue 46), over loopback against the sandbox: a paid
tool result lost in flight (the connection cut after the response headers) is asked for again
by svc_queryAgent with the same ``_meta["x402/idempotency-key"]`` and token, and comes back the
same, paid once; concurrent calls with one key run once; another call under a used key is
refused and burns nothing. Conservation: granted = balance + burned."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from svc_gateway.interop.mcp_sdk import RpcError
from tests.support.cutting import CutProxy

from .conftest import GRANTED, BuyerFactory, McpMarket
from .test_buying import sell_forecast


def payment(token: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    return data


async def test_a_lost_tool_result_comes_back_to_its_retry_paid_once(
    mcp_market: McpMarket, make_buyer: BuyerFactory
) -> None:
    # the SDK's client waits out a cut response: the retry comes when the first attempt has
    # taken its share of the query's one deadline (all but 2 s here)
    buyer = await make_buyer(mcp_market, requestTimeoutSecs=5)
    calls: list[dict[str, Any]] = []
    sell_forecast(mcp_market, calls)
    proxy = CutProxy(cuts=1)
    proxy.upstream = mcp_market.url.split("/mcp")[0]
    await proxy.start()
    try:
        result = await buyer.call_tool(
            "svc_queryAgent",
            {
                "agentUrl": proxy.origin + "/mcp",
                "tool": "forecast",
                "arguments": {"city": "Lima"},
                "agentId": mcp_market.agent_id,
            },
        )
    finally:
        await proxy.close()
    assert not result.isError, result.structuredContent
    out = result.structuredContent
    assert len(proxy.lost) == 1 and out["retries"] == 1
    assert out["answer"] == {"city": "Lima", "forecast": "sunny"}
    assert out["receipt"]["transaction"] == proxy.lost[0]["transaction"]
    assert calls == [{"city": "Lima"}]
    assert await mcp_market.burned() == 2 and await mcp_market.balance() == GRANTED - 2


async def test_one_key_runs_once_and_another_call_under_it_is_refused(
    mcp_market: McpMarket,
) -> None:
    gate = asyncio.Event()
    calls: list[dict[str, Any]] = []

    async def forecast(arguments: dict[str, Any]) -> dict[str, Any]:
        calls.append(arguments)
        await gate.wait()
        return {"city": arguments["city"], "forecast": "sunny"}

    from svc_gateway.selling.ways_in.mcp import Options

    from .test_selling import FORECAST_SCHEMA

    mcp_market.server.tool(
        "forecast", forecast, input_schema=FORECAST_SCHEMA, options=Options(credits=2)
    )
    token = await mcp_market.token("forecast")
    meta = {"x402/payment": payment(token), "x402/idempotency-key": "svc_mcp_key_000000001"}
    runtime = mcp_market.handle.runtime

    async def call(city: str) -> dict[str, Any]:
        """The tool's result, or the JSON-RPC error's message as ``{"error": ...}``."""
        try:
            async with mcp_market.session(token) as session:
                return await session.call_tool("forecast", {"city": city}, meta)
        except RpcError as exc:
            return {"error": exc.message}

    first = asyncio.create_task(call("Lima"))
    for _ in range(500):
        if calls:
            break
        await asyncio.sleep(0.02)
    busy = await call("Lima")
    runtime.loop.call_soon_threadsafe(gate.set)
    paid = await first
    again = await call("Lima")
    reused = await call("Quito")
    assert "still running" in busy["error"]
    assert not paid.get("isError") and again["structuredContent"] == paid["structuredContent"]
    assert again["_meta"]["x402/payment-response"] == paid["_meta"]["x402/payment-response"]
    assert "used for another request" in reused["error"]
    assert calls == [{"city": "Lima"}]
    assert await mcp_market.burned() == 2
