"""svc_queryAgent's checks and failures against MCP agents: whom to pay, which tool, which plan,
an endpoint that does not talk MCP, error results and long text answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from svc_gateway.buying.answers import MAX_TEXT_CHARS
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.selling.ways_in.mcp import Options
from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.service.pricing import crypto_price, fixed_credits
from tests.support import serve_app

from .conftest import GRANTED, SERVER_NAME, USDC, BuyerFactory, McpMarket, McpMarketFactory
from .test_settle_failures import SettleOutage


async def query(buyer: ReferenceGateway, **params: Any) -> dict[str, Any]:
    result = await buyer.call_tool("svc_queryAgent", params)
    out: dict[str, Any] = result.structuredContent
    return out["error"] if result.isError else {"ok": out}


@pytest.fixture
async def not_mcp() -> AsyncIterator[str]:
    """A loopback server at .../mcp that is no MCP server: every request gets 404."""

    async def nothing(_request: web.Request) -> web.Response:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", nothing)
    async with serve_app(app) as origin:
        yield f"{origin}/mcp"


async def test_an_endpoint_that_is_not_mcp(
    mcp_market: McpMarket, buyer: ReferenceGateway, not_mcp: str
) -> None:
    """Without agentId and without the server's info nobody is paid; with agentId the token
    goes out (as the bearer) and the session fails: the result says what the service shows."""
    unknown = await query(buyer, agentUrl=not_mcp, tool="forecast", arguments={})
    assert unknown["code"] == "unknown_agent" and "nothing was paid" in unknown["message"]
    failed = await query(
        buyer, agentUrl=not_mcp, agentId=mcp_market.agent_id, tool="forecast", arguments={}
    )
    assert failed["code"] == "agent_unreachable"
    assert f"nothing charged so far (balance {GRANTED} credits)" in failed["message"]
    assert await mcp_market.burned() == 0


async def test_a_tool_outside_the_agents_registered_uris_or_plans_is_not_paid(
    mcp_market: McpMarket, buyer: ReferenceGateway
) -> None:
    """An agent registering two MCP servers and one tool of ours, selling two plans: the
    server's own name picks the server, another tool is not paid, and the plan must be named."""
    builder = mcp_market.builder_client
    assert builder.address is not None
    second_plan = await builder.register_plan(
        PlanMetadata(name="Second plan"),
        crypto_price([1_000_000], [builder.address], USDC),
        fixed_credits(10),
    )
    endpoints = [
        {"POST": f"mcp://{SERVER_NAME}/tools/forecast"},
        {"POST": "mcp://other-srv/tools/*"},
    ]
    agent_id = await builder.register_agent(
        AgentMetadata(name="Two servers"),
        AgentApi(endpoints=endpoints),
        [mcp_market.plan_id, second_plan],
    )
    mcp_market.server.tool("forecast", lambda _a: "rain", options=Options(credits=2))
    mcp_market.server.tool("secret", lambda _a: "recipe", options=Options(credits=2))
    other = await query(
        buyer, agentUrl=mcp_market.url, agentId=agent_id, tool="secret", arguments={}
    )
    assert other["code"] == "agent_url_not_registered"
    assert f'"mcp://{SERVER_NAME}/tools/secret"' in other["message"]
    unnamed = await query(
        buyer, agentUrl=mcp_market.url, agentId=agent_id, tool="forecast", arguments={}
    )
    assert unnamed["code"] == "missing_plan_id" and second_plan in unnamed["message"]
    assert await mcp_market.burned() == 0


async def test_prompt_fills_only_a_one_argument_tool(
    mcp_market: McpMarket, buyer: ReferenceGateway
) -> None:
    mcp_market.server.tool("now", lambda _a: "noon", options=Options(credits=2))
    refused = await query(buyer, agentUrl=mcp_market.url, tool="now", prompt="what time")
    assert refused["code"] == "invalid_params"
    assert "takes no arguments" in refused["message"]
    assert await mcp_market.burned() == 0


async def test_a_long_text_answer_is_cut_with_a_warning_and_a_failing_tool_is_an_error(
    mcp_market: McpMarket, buyer: ReferenceGateway
) -> None:
    def broken(_arguments: Any) -> str:
        raise RuntimeError("the model is down")

    mcp_market.server.tool("essay", lambda _a: "x" * (MAX_TEXT_CHARS + 5), options=Options())
    mcp_market.server.tool("broken", broken, options=Options(credits=2))
    essay = (await query(buyer, agentUrl=mcp_market.url, tool="essay", arguments={}))["ok"]
    assert essay["answer"] == "x" * MAX_TEXT_CHARS
    assert any("cut short" in warning for warning in essay["warnings"])
    assert essay["receipt"]["creditsRedeemed"] == "1"
    failed = await query(buyer, agentUrl=mcp_market.url, tool="broken", arguments={})
    assert failed["code"] == "agent_error" and failed["message"].startswith("The tool failed: ")
    assert "the service shows nothing was charged" in failed["message"]
    assert await mcp_market.burned() == 1  # the essay only


async def test_a_json_rpc_error_after_the_tool_ran_is_reported_with_the_charge(
    make_mcp_market: McpMarketFactory, make_buyer: BuyerFactory
) -> None:
    """onRedeemError propagate: the seller's settle fails, the content is withheld and the
    call answers a JSON-RPC error; the buyer is told the service shows nothing charged."""
    market = await make_mcp_market(transport=SettleOutage())
    buyer = await make_buyer(market)
    market.server.tool(
        "forecast", lambda _a: "rain", options=Options(credits=2, on_redeem_error="propagate")
    )
    failed = await query(buyer, agentUrl=market.url, tool="forecast", arguments={})
    assert failed["code"] == "agent_error"
    assert failed["message"].startswith("The MCP agent answered with an error (")
    assert "rain" not in failed["message"]
    assert (
        f"the service shows nothing was charged (balance {GRANTED} credits)" in (failed["message"])
    )
    assert await market.burned() == 0


async def test_an_agent_registered_with_one_tool_lists_and_answers_a_bare_prompt(
    make_mcp_market: McpMarketFactory, make_buyer: BuyerFactory
) -> None:
    """An agent registered the README's first way (``mcp://<server>/tools/ask`` only): listing
    is allowed and costs nothing, a prompt without ``tool`` goes to ``ask``, and a tool it did
    not register is refused with a hint naming ``tool: "ask"``."""
    market = await make_mcp_market(endpoints=[f"mcp://{SERVER_NAME}/tools/ask"])
    buyer = await make_buyer(market)
    schema = {"type": "object", "properties": {"prompt": {"type": "string"}}}
    market.server.tool(
        "ask", lambda a: f"echo: {a['prompt']}", input_schema=schema, options=Options(credits=2)
    )
    market.server.tool("secret", lambda _a: "recipe", options=Options(credits=2))
    listed = (await query(buyer, agentUrl=market.url, listTools=True))["ok"]
    assert [tool["tool"] for tool in listed["tools"]] == ["ask", "secret"]
    assert await market.burned() == 0
    answered = (await query(buyer, agentUrl=market.url, prompt="hello"))["ok"]
    assert answered["tool"] == "ask" and answered["answer"] == "echo: hello"
    assert answered["receipt"]["creditsRedeemed"] == "2"
    other = await query(buyer, agentUrl=market.url, tool="secret", arguments={})
    assert other["code"] == "agent_url_not_registered"
    assert 'tool: "ask"' in other["hint"] and "listTools" not in other["hint"]
    assert await market.burned() == 2
