"""The paid MCP server driven by the official MCP client over loopback HTTP, against the sandbox:
the session needs a bearer, payment travels in ``_meta``, every burn is exact."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import httpx
import pytest

from svc_gateway.interop.mcp_sdk import MISCONFIGURATION_CODE, PAYMENT_REQUIRED_CODE, RpcError
from svc_gateway.selling.ways_in.mcp import Options

from .conftest import GRANTED, McpMarket, McpMarketFactory

FORECAST_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def add_forecast(market: McpMarket, calls: list[dict[str, Any]], **options: Any) -> None:
    async def forecast(arguments: dict[str, Any]) -> dict[str, Any]:
        calls.append(arguments)
        return {"city": arguments["city"], "forecast": "sunny", "high": 21}

    market.server.tool(
        "forecast",
        forecast,
        description="Tomorrow's weather",
        input_schema=FORECAST_SCHEMA,
        options=Options(**options),
    )


def assert_payment_required(result: dict[str, Any], market: McpMarket, uri: str) -> None:
    assert result["isError"] is True
    required = result["structuredContent"]
    assert required["x402Version"] == 2
    assert required["resource"]["url"] == uri
    assert [a["planId"] for a in required["accepts"]] == [market.plan_id]
    assert required["accepts"][0]["extra"]["agentId"] == market.agent_id
    assert required["error"]
    assert json.loads(result["content"][0]["text"]) == required


async def test_session_without_bearer_is_http_401(mcp_market: McpMarket) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    async with httpx.AsyncClient() as http:
        reply = await http.post(
            mcp_market.url,
            json=initialize,
            headers={"Accept": "application/json, text/event-stream"},
        )
    assert reply.status_code == 401
    challenge = reply.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert "/.well-known/oauth-protected-resource" in challenge
    with pytest.raises(Exception):  # noqa: B017 - the SDK's own error type differs per major
        async with mcp_market.session(None):
            pass


async def test_tools_list_names_tools_with_their_price(mcp_market: McpMarket) -> None:
    add_forecast(mcp_market, [], credits=3)
    mcp_market.server.tool("ping", lambda _a: "pong", options=Options(credits=0))
    async with mcp_market.session("any-bearer") as session:
        tools = {t["name"]: t for t in await session.list_tools()}
    assert set(tools) == {"forecast", "ping"}
    assert tools["forecast"]["inputSchema"] == FORECAST_SCHEMA
    price = tools["forecast"]["_meta"]["svc/price"]
    assert price == {
        "planId": mcp_market.plan_id,
        "credits": "3",
        "maxAmount": "1",
        "uri": mcp_market.uri("forecast"),
    }
    assert tools["ping"]["_meta"]["svc/price"]["credits"] == "0"


async def test_call_without_payment_is_an_error_result_with_payment_required(
    mcp_market: McpMarket,
) -> None:
    calls: list[dict[str, Any]] = []
    add_forecast(mcp_market, calls)
    async with mcp_market.session("not-a-payment") as session:
        result = await session.call_tool("forecast", {"city": "Oslo"}, None)
    assert_payment_required(result, mcp_market, mcp_market.uri("forecast"))
    assert result["_meta"]["svc/credits"]["creditsRedeemed"] == "0"
    assert result["_meta"]["svc/credits"]["success"] is False
    assert "x402/payment-response" not in result["_meta"]
    assert calls == []  # the tool never ran
    assert await mcp_market.balance() == GRANTED


async def test_paid_call_returns_result_receipt_and_burns_exactly(mcp_market: McpMarket) -> None:
    calls: list[dict[str, Any]] = []
    add_forecast(mcp_market, calls, credits=2)
    token, meta = await mcp_market.payment("forecast")
    async with mcp_market.session(token) as session:
        result = await session.call_tool("forecast", {"city": "Oslo"}, meta)
        retry = await session.call_tool("forecast", {"city": "Oslo"}, meta)
        other = await session.call_tool("forecast", {"city": "Bergen"}, meta)
    assert result.get("isError") in (None, False)
    assert result["structuredContent"] == {"city": "Oslo", "forecast": "sunny", "high": 21}
    receipt = result["_meta"]["x402/payment-response"]
    assert receipt["success"] is True
    assert receipt["creditsRedeemed"] == "2"
    assert receipt["remainingBalance"] == str(GRANTED - 2)
    assert receipt["payer"].lower() == mcp_market.subscriber_address.lower()
    assert receipt["transaction"] and receipt["network"]
    credits = result["_meta"]["svc/credits"]
    assert credits == {
        "success": True,
        "txHash": receipt["transaction"],
        "creditsRedeemed": "2",
        "planId": mcp_market.plan_id,
        "subscriberAddress": credits["subscriberAddress"],
    }
    assert credits["subscriberAddress"].lower() == mcp_market.subscriber_address.lower()
    # a retry of the same call with the same single-use token gets the answer it paid for,
    # without running or charging again; another call with the spent token gets nothing
    assert retry["structuredContent"] == result["structuredContent"]
    assert retry["_meta"]["x402/payment-response"] == receipt
    assert_payment_required(other, mcp_market, mcp_market.uri("forecast"))
    assert "Bergen" not in json.dumps(other["content"])
    assert other["structuredContent"]["error"].startswith("settlement failed")
    assert calls == [{"city": "Oslo"}, {"city": "Bergen"}]
    assert mcp_market.server.flow.stats.replayed == 1
    assert await mcp_market.burned() == 2
    assert mcp_market.server.flow.stats.credits_settled == 2


async def test_invalid_arguments_are_refused_before_any_payment(mcp_market: McpMarket) -> None:
    calls: list[dict[str, Any]] = []
    add_forecast(mcp_market, calls)
    token, meta = await mcp_market.payment("forecast")
    async with mcp_market.session(token) as session:
        result = await session.call_tool("forecast", {"town": "Oslo"}, meta)
    assert result["isError"] is True
    assert "city" in result["content"][0]["text"]
    assert calls == [] and await mcp_market.balance() == GRANTED


async def test_free_tool_needs_no_payment_and_reports_zero_credits(
    mcp_market: McpMarket,
) -> None:
    mcp_market.server.tool("ping", lambda _a: "pong", options=Options(credits=0))
    requests = mcp_market.server.flow.stats.requests
    async with mcp_market.session("no-payment-here") as session:
        result = await session.call_tool("ping", {}, None)
    assert result["content"] == [{"type": "text", "text": "pong"}]
    assert "x402/payment-response" not in result["_meta"]
    assert result["_meta"]["svc/credits"]["creditsRedeemed"] == "0"
    assert result["_meta"]["svc/credits"]["success"] is True
    assert mcp_market.server.flow.stats.requests == requests  # nothing verified
    assert await mcp_market.balance() == GRANTED


async def test_credits_by_function_of_arguments_and_result(mcp_market: McpMarket) -> None:
    seen: list[dict[str, Any]] = []

    def days(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"days": [f"day {i}" for i in range(int(arguments["n"]))]}

    def price(context: dict[str, Any]) -> int:
        seen.append(context)
        return len(context["result"]["days"])

    mcp_market.server.tool("outlook", days, options=Options(credits=price, max_amount=5))
    token, meta = await mcp_market.payment("outlook")
    async with mcp_market.session(token) as session:
        result = await session.call_tool("outlook", {"n": 4}, meta)
    assert result["_meta"]["x402/payment-response"]["creditsRedeemed"] == "4"
    assert len(result["structuredContent"]["days"]) == 4
    assert seen[0]["args"] == {"n": 4}
    assert seen[0]["request"]["logicalUrl"] == mcp_market.uri("outlook")
    assert await mcp_market.burned() == 4


async def test_resource_and_prompt_are_paid_in_band(mcp_market: McpMarket) -> None:
    server = mcp_market.server
    server.resource(
        "guide",
        "docs://guide",
        lambda uri: f"The guide at {uri}",
        mime_type="text/markdown",
        options=Options(credits=1),
    )
    server.prompt(
        "haiku",
        lambda args: f"Write a haiku about {args['topic']}",
        arguments=[{"name": "topic", "required": True}],
        options=Options(credits=2),
    )
    resource_uri = "docs://guide"
    _token_r, meta_r = await mcp_market.payment(resource_uri, "resources")
    _token_p, meta_p = await mcp_market.payment("haiku", "prompts")
    async with mcp_market.session("session-only") as session:
        with pytest.raises(RpcError) as unpaid_resource:
            await session.read_resource(resource_uri, None)
        with pytest.raises(RpcError) as unpaid_prompt:
            await session.get_prompt("haiku", {"topic": "rain"}, {"other": 1})
        resource = await session.read_resource(resource_uri, meta_r)
        prompt = await session.get_prompt("haiku", {"topic": "rain"}, meta_p)
    for refused, uri in (
        (unpaid_resource.value, mcp_market.uri(resource_uri, "resources")),
        (unpaid_prompt.value, mcp_market.uri("haiku", "prompts")),
    ):
        assert refused.code == PAYMENT_REQUIRED_CODE
        assert refused.data["x402Version"] == 2
        assert refused.data["resource"]["url"] == uri
    assert resource["contents"][0]["text"] == "The guide at docs://guide"
    assert resource["contents"][0]["mimeType"] == "text/markdown"
    assert resource["_meta"]["x402/payment-response"]["creditsRedeemed"] == "1"
    assert prompt["messages"][0]["content"]["text"] == "Write a haiku about rain"
    assert prompt["_meta"]["svc/credits"]["creditsRedeemed"] == "2"
    assert await mcp_market.burned() == 3


async def test_the_sessions_bearer_alone_pays_as_a_first_class_way_and_in_band_comes_first(
    mcp_market: McpMarket, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 43.5: every generic MCP client pays through the session's bearer (an access token
    for the agent's plan, as OAuth gives it): a call without ``_meta["x402/payment"]`` pays with
    it, and nothing calls that deprecated or announces its removal. A call that carries its
    payment in band pays with that, whatever the bearer is."""
    add_forecast(mcp_market, [])
    token = await mcp_market.token("forecast")
    with caplog.at_level(logging.DEBUG):
        async with mcp_market.session(token) as session:
            result = await session.call_tool("forecast", {"city": "Rome"}, None)
    assert result["_meta"]["x402/payment-response"]["creditsRedeemed"] == "1"
    assert await mcp_market.burned() == 1
    said = " ".join(r.getMessage() for r in caplog.records if r.name.startswith("svc_gateway"))
    assert "deprecated" not in said and "removed" not in said and "next release" not in said
    assert token not in caplog.text
    _token, in_band = await mcp_market.payment("forecast")
    async with mcp_market.session("not-a-token") as session:  # in band first
        paid = await session.call_tool("forecast", {"city": "Oslo"}, in_band)
    assert paid["_meta"]["x402/payment-response"]["creditsRedeemed"] == "1"
    assert await mcp_market.burned() == 2


async def spend_elsewhere(market: McpMarket, token: str, uri: str) -> None:
    """Settle ``token`` behind the server's back (a race the service resolves: the token is
    single use), so the server's own settle after the work is refused."""
    flow = market.server.flow
    facts = await flow.facts(market.plan_id)
    envelope = flow.admitter.envelope(facts, market.agent_id, uri, amount=1)
    settled = await market.server.core.client().settle(envelope, token, 1, None)
    assert settled.success


@pytest.mark.parametrize("mode", ["ignore", "propagate"])
async def test_settle_failing_after_the_tool_ran_suppresses_the_content(
    mcp_market: McpMarket, mode: str
) -> None:
    uri = mcp_market.uri("secret")
    paid: dict[str, str] = {}

    async def secret(_arguments: dict[str, Any]) -> str:
        await spend_elsewhere(mcp_market, paid["token"], uri)
        return "the secret recipe"

    mcp_market.server.tool(
        "secret",
        secret,
        options=Options(credits=2, on_redeem_error=mode),  # type: ignore[arg-type]
    )
    paid["token"], meta = await mcp_market.payment("secret")
    async with mcp_market.session("session") as session:
        if mode == "ignore":
            result = await session.call_tool("secret", {}, meta)
            assert_payment_required(result, mcp_market, uri)
            assert result["structuredContent"]["error"].startswith("settlement failed")
            assert "recipe" not in json.dumps(result)
        else:
            with pytest.raises(RpcError) as raised:
                await session.call_tool("secret", {}, meta)
            assert raised.value.code == MISCONFIGURATION_CODE
            assert raised.value.data["resource"]["url"] == uri
            assert "recipe" not in json.dumps(raised.value.data) + raised.value.message
    # only the side-channel settle burned (1 credit); the server's 2 never were
    assert await mcp_market.burned() == 1
    assert mcp_market.server.flow.stats.settle_refused == 1


async def test_credits_function_zero_is_free_and_failing_is_uncharged(
    mcp_market: McpMarket,
) -> None:
    def zero(_context: dict[str, Any]) -> int:
        return 0

    def broken(_context: dict[str, Any]) -> int:
        raise ValueError("no price")

    mcp_market.server.tool("maybe", lambda _a: "free today", options=Options(credits=zero))
    mcp_market.server.tool("broken", lambda _a: "never sold", options=Options(credits=broken))
    _token_a, meta_a = await mcp_market.payment("maybe")
    _token_b, meta_b = await mcp_market.payment("broken")
    async with mcp_market.session("session") as session:
        free = await session.call_tool("maybe", {}, meta_a)
        failed = await session.call_tool("broken", {}, meta_b)
    assert free["content"][0]["text"] == "free today"
    assert "x402/payment-response" not in free["_meta"]
    assert free["_meta"]["svc/credits"]["creditsRedeemed"] == "0"
    assert failed["isError"] is True
    assert "never sold" not in json.dumps(failed)
    assert await mcp_market.burned() == 0
    assert (
        mcp_market.server.flow.book.known(mcp_market.plan_id, mcp_market.subscriber_address)[1] == 0
    )


async def test_a_failing_handler_is_not_charged(mcp_market: McpMarket) -> None:
    def broken(_arguments: Any) -> str:
        raise RuntimeError("the model is down")

    mcp_market.server.tool("broken", broken, options=Options(credits=2))
    mcp_market.server.resource("doc", "docs://broken", broken, options=Options(credits=2))
    _token, meta = await mcp_market.payment("broken")
    _token_r, meta_r = await mcp_market.payment("docs://broken", "resources")
    async with mcp_market.session("session") as session:
        result = await session.call_tool("broken", {}, meta)
        with pytest.raises(RpcError) as resource_error:
            await session.read_resource("docs://broken", meta_r)
        with pytest.raises(RpcError) as unknown:
            await session.call_tool("nope", {}, meta)
    assert result["isError"] is True
    assert "nothing was charged" in result["content"][0]["text"]
    assert result["_meta"]["svc/credits"] == {
        "success": False,
        "txHash": "",
        "creditsRedeemed": "0",
        "planId": mcp_market.plan_id,
        "subscriberAddress": result["_meta"]["svc/credits"]["subscriberAddress"],
    }
    assert "nothing was charged" in resource_error.value.message
    assert "Unknown tool" in unknown.value.message
    assert mcp_market.server.flow.stats.handler_failures == 2
    assert await mcp_market.burned() == 0


async def test_a_server_without_a_plan_refuses_calls_without_charging(
    make_mcp_market: McpMarketFactory,
) -> None:
    mcp_market = await make_mcp_market(plan_in_config=False)
    server = mcp_market.server
    assert server.plan_id() is None
    server.tool("forecast", lambda _a: "sun", options=Options(credits=1))
    _token, meta = await mcp_market.payment("forecast")
    async with mcp_market.session("session") as session:
        with pytest.raises(RpcError) as refused:
            await session.call_tool("forecast", {}, meta)
    assert refused.value.code == MISCONFIGURATION_CODE
    assert "no plan" in refused.value.message
    assert await mcp_market.burned() == 0


async def test_concurrent_calls_never_overdraw_and_deliver_only_what_was_paid(
    mcp_market: McpMarket,
) -> None:
    """12 concurrent calls of a 10-credit tool against 100 credits: exactly 10 answers, each
    paid; the other 2 get payment-required and no content (verify reserves nothing, the
    flow's admission does). Conservation: granted = balance + burned = balance + paid.

    Each paid answer is held until the two calls the balance cannot cover were refused: a call
    admitted after every claim had settled would be the payer's top-up at settle (the book lets
    verify decide then), which is the automatic top-up's rule, not this test's."""
    flow = mcp_market.server.flow

    async def costly(arguments: dict[str, Any]) -> str:
        deadline = time.monotonic() + 30
        while flow.stats.refused < 2 and time.monotonic() < deadline:  # noqa: ASYNC110 - polled: the count is not an event on this loop
            await asyncio.sleep(0.01)
        return f"answer {arguments['n']}"

    mcp_market.server.tool("costly", costly, options=Options(credits=10))
    payments = [await mcp_market.payment("costly") for _ in range(12)]

    async def call(n: int) -> dict[str, Any]:
        token, meta = payments[n]
        async with mcp_market.session(token) as session:
            return await session.call_tool("costly", {"n": n}, meta)

    results = await asyncio.gather(*(call(n) for n in range(12)))
    paid = [r for r in results if not r.get("isError")]
    refused = [r for r in results if r.get("isError")]
    assert len(paid) == 10 and len(refused) == 2
    for result in paid:
        assert result["_meta"]["x402/payment-response"]["creditsRedeemed"] == "10"
    for result in refused:
        assert result["structuredContent"]["x402Version"] == 2
        assert "answer" not in json.dumps(result["content"])
    burned = sum(int(r["_meta"]["x402/payment-response"]["creditsRedeemed"]) for r in paid)
    assert await mcp_market.balance() + burned == GRANTED
    assert await mcp_market.burned() == burned == 100
