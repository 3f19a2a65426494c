"""Stateless HTTP and the newest MCP revision (issue 43.7): a client that keeps no session (no
``initialize``, no ``Mcp-Session-Id``, the bearer on every request) pays per request, on both
mcp majors; on mcp 2.x the official client in its newest mode (revision 2026-07-28: no session,
per-request auth) pays too."""

from __future__ import annotations

import json
from typing import Any

import httpx

from .conftest import McpMarket
from .test_selling import add_forecast

HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


async def post(
    market: McpMarket, bearer: str, method: str, params: dict[str, Any], ident: int = 1
) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
    headers = {**HEADERS, "Authorization": f"Bearer {bearer}"}
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(market.url, json=body, headers=headers)


def result(reply: httpx.Response) -> dict[str, Any]:
    assert reply.status_code == 200, reply.text
    assert "mcp-session-id" not in reply.headers  # nothing to keep
    answer: dict[str, Any] = json.loads(reply.text)["result"]
    return answer


async def test_stateless_requests_pay_one_by_one_with_the_bearer_or_in_band(
    mcp_market: McpMarket,
) -> None:
    calls: list[dict[str, Any]] = []
    add_forecast(mcp_market, calls)
    listed = result(await post(mcp_market, "any-bearer", "tools/list", {}))
    assert [tool["name"] for tool in listed["tools"]] == ["forecast"]
    by_bearer = await mcp_market.token("forecast")
    paid = result(
        await post(
            mcp_market, by_bearer, "tools/call", {"name": "forecast", "arguments": {"city": "Rome"}}
        )
    )
    assert paid["_meta"]["x402/payment-response"]["creditsRedeemed"] == "1"
    _token, meta = await mcp_market.payment("forecast")
    params = {"name": "forecast", "arguments": {"city": "Oslo"}, "_meta": meta}
    in_band = result(await post(mcp_market, "another-bearer", "tools/call", params, 2))
    assert in_band["structuredContent"]["city"] == "Oslo"
    unpaid = result(
        await post(
            mcp_market,
            "no-token",
            "tools/call",
            {"name": "forecast", "arguments": {"city": "Bern"}},
            3,
        )
    )
    assert unpaid["isError"] is True and unpaid["structuredContent"]["x402Version"] == 2
    assert [c["city"] for c in calls] == ["Rome", "Oslo"]
    assert await mcp_market.burned() == 2


async def test_a_body_that_is_not_json_gets_the_sdks_parse_error_statelessly(
    mcp_market: McpMarket,
) -> None:
    headers = {**HEADERS, "Authorization": "Bearer x", "Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=30) as http:
        reply = await http.post(mcp_market.url, content=b"{not json", headers=headers)
        batch = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}]
        listed = await http.post(mcp_market.url, json=batch, headers=headers)
    assert reply.status_code == 400 and reply.json()["error"]["code"] == -32700
    assert "mcp-session-id" not in reply.headers and "mcp-session-id" not in listed.headers
    assert await mcp_market.burned() == 0
