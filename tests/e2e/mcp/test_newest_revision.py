"""The official mcp 2.x client in its newest mode (revision 2026-07-28: ``server/discover``, no
session, the bearer on every request) pays per request, by the bearer and in band; in ``auto``
mode it does too. Collected where mcp 2.x is installed (CI's mcp 2.x venv; tests/e2e/mcp's
conftest leaves it out on 1.x, whose SDK does not speak that revision)."""

from __future__ import annotations

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from .conftest import McpMarket
from .test_selling import add_forecast


async def test_the_newest_revision_pays_per_request_with_the_bearer_or_in_band(
    mcp_market: McpMarket,
) -> None:
    calls: list[dict[str, object]] = []
    add_forecast(mcp_market, calls)
    for mode, city in (("2026-07-28", "Rome"), ("auto", "Oslo")):
        bearer = await mcp_market.token("forecast")
        _token, in_band = await mcp_market.payment("forecast")
        headers = {"Authorization": f"Bearer {bearer}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(mcp_market.url, http_client=http), mode=mode) as client,
        ):
            assert [t.name for t in (await client.list_tools()).tools] == ["forecast"]
            paid = await client.call_tool("forecast", {"city": city})
            again = await client.call_tool("forecast", {"city": city}, meta=in_band)
        for result in (paid, again):
            wire = result.model_dump(by_alias=True, exclude_none=True)
            assert wire["isError"] is False, wire
            assert wire["_meta"]["x402/payment-response"]["creditsRedeemed"] == "1"
    assert [c["city"] for c in calls] == ["Rome", "Rome", "Oslo", "Oslo"]
    assert await mcp_market.burned() == 4
