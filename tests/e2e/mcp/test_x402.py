"""The paid MCP server's PaymentRequired results and receipts read as x402 v2 (issue 31): parsed
by the x402 reference SDK's own MCP helpers, from the same builder as the HTTP 402s (the
official MCP client over loopback HTTP, against the sandbox)."""

from __future__ import annotations

from typing import Any

import pytest

from svc_gateway.interop.mcp_sdk import PAYMENT_REQUIRED_CODE, RpcError
from svc_gateway.selling.flow.plans import payment_deadline_secs
from svc_gateway.selling.ways_in.mcp import Options

from .conftest import McpMarket
from .test_selling import spend_elsewhere

x402_mcp = pytest.importorskip("x402.mcp.utils", reason="the test extra installs the x402 SDK")
x402_types = pytest.importorskip("x402.mcp.types")
x402_schemas = pytest.importorskip("x402.schemas")


def required_of(result: dict[str, Any]) -> Any:
    """The PaymentRequired the x402 SDK's MCP client finds in a tool result (``None``: none)."""
    tool_result = x402_types.MCPToolResult(
        content=result["content"],
        is_error=bool(result.get("isError")),
        structured_content=result.get("structuredContent"),
    )
    return x402_mcp.extract_payment_required_from_result(tool_result)


def forecast(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"city": arguments["city"], "days": ["sun"] * int(arguments.get("n", 1))}


async def test_an_unpaid_tool_call_is_an_x402_payment_required_with_its_price(
    mcp_market: McpMarket,
) -> None:
    mcp_market.server.tool("forecast", forecast, options=Options(credits=2))
    # priced from the result: the 402 states the ceiling verified
    mcp_market.server.tool(
        "outlook",
        forecast,
        options=Options(credits=lambda c: len(c["result"]["days"]), max_amount=4),
    )
    async with mcp_market.session("no-payment") as session:
        fixed = await session.call_tool("forecast", {"city": "Oslo"}, None)
        priced = await session.call_tool("outlook", {"city": "Oslo", "n": 2}, None)
    required = required_of(fixed)
    assert required is not None and required.x402_version == 2
    assert required.resource.url == mcp_market.uri("forecast")
    (accept,) = required.accepts
    assert accept.scheme == "svc:erc4337" and accept.network == "eip155:84532"
    assert accept.amount == "2"
    assert accept.pay_to.lower() == (mcp_market.builder_client.address or "").lower()
    assert accept.asset.endswith(f"/{mcp_market.plan_id}")
    assert accept.max_timeout_seconds == payment_deadline_secs(mcp_market.server.core.config)
    assert accept.extra["agentId"] == mcp_market.agent_id
    assert fixed["structuredContent"]["accepts"][0]["planId"] == mcp_market.plan_id
    assert required_of(priced).accepts[0].amount == "4"


async def test_a_paid_tool_calls_receipt_reads_as_an_x402_settle_response(
    mcp_market: McpMarket,
) -> None:
    mcp_market.server.tool("forecast", forecast, options=Options(credits=2))
    _token, meta = await mcp_market.payment("forecast")
    async with mcp_market.session("session") as session:
        result = await session.call_tool("forecast", {"city": "Oslo"}, meta)
    receipt = x402_schemas.SettleResponse.model_validate(result["_meta"]["x402/payment-response"])
    assert receipt.success is True and receipt.transaction
    assert receipt.network == "eip155:84532"


async def test_a_settle_failure_carries_x402s_failed_payment_response(
    mcp_market: McpMarket,
) -> None:
    uri = mcp_market.uri("secret")
    paid: dict[str, str] = {}

    async def secret(_arguments: dict[str, Any]) -> str:
        await spend_elsewhere(mcp_market, paid["token"], uri)
        return "the secret recipe"

    mcp_market.server.tool("secret", secret, options=Options(credits=2))
    paid["token"], meta = await mcp_market.payment("secret")
    async with mcp_market.session("session") as session:
        result = await session.call_tool("secret", {}, meta)
    assert required_of(result) is not None
    failed = x402_schemas.SettleResponse.model_validate(
        result["structuredContent"]["x402/payment-response"]
    )
    assert failed.success is False and failed.error_reason
    assert failed.transaction == "" and failed.network == "eip155:84532"
    assert "recipe" not in str(result)


async def test_an_unpaid_resource_errors_with_an_x402_payment_required(
    mcp_market: McpMarket,
) -> None:
    mcp_market.server.resource("guide", "docs://guide", lambda uri: "the guide")
    async with mcp_market.session("session") as session:
        with pytest.raises(RpcError) as refused:
            await session.read_resource("docs://guide", None)
    assert refused.value.code == PAYMENT_REQUIRED_CODE
    required = x402_schemas.PaymentRequired.model_validate(refused.value.data)
    assert required.accepts[0].amount == "1"
