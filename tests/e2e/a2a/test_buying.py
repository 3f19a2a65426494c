"""svc_queryAgent paying an A2A agent with the official a2a-sdk client, from a second gateway."""

from __future__ import annotations

import asyncio
from pathlib import Path

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.buying.a2a_probe import origin_of
from svc_gateway.hosts.reference import ReferenceGateway
from tests.helpers import approve
from tests.support import serve_app

from .conftest import GRANTED, A2AMarket, MarketFactory


async def buyer_of(
    market: A2AMarket, tmp_path: Path, approval: str = "model"
) -> tuple[ReferenceGateway, svc_gateway.PluginHandle]:
    """A second gateway paying as the subscriber; ``approval: model`` unless a test is about
    the person's approval (issue 41: A2A queries go through the spending gate)."""
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": market.sandbox.base_url,
            "svcApiKey": market.subscriber_key,
            "approval": approval,
        }
    )
    store = CredentialStore(tmp_path / "buyer", use_keyring=False)
    handle = await asyncio.to_thread(svc_gateway.register, gateway, store=store)
    return gateway, handle


async def test_query_agent_pays_an_a2a_agent_and_reports_the_exact_charge(
    market: A2AMarket, tmp_path: Path
) -> None:
    buyer, handle = await buyer_of(market, tmp_path)
    try:
        result = await buyer.call_tool(
            "svc_queryAgent", {"agentUrl": market.url, "prompt": "three little words"}
        )
    finally:
        await asyncio.to_thread(handle.close)
    assert not result.isError, result.structuredContent
    out = result.structuredContent
    assert "3 words" in out["answer"]
    assert out["receipt"]["valid"] is True and out["receipt"]["creditsRedeemed"] == "1"
    assert out["balanceAfter"] == str(GRANTED - 1)
    assert out["agentId"] == market.agent_id and out["planId"] == market.plan_id
    assert out["tokenVersion"] == 3
    assert "warnings" not in out
    assert await market.burned() == 1  # the ledger: granted = balance + burned


async def test_an_impostor_card_naming_another_agent_is_refused_before_paying(
    make_market: MarketFactory, tmp_path: Path
) -> None:
    honest = await make_market()
    impostor = await make_market()
    impostor.handle.core.agent_id = honest.agent_id  # its card claims the honest agent's id
    impostor.subscriber_key = honest.subscriber_key
    buyer, handle = await buyer_of(honest, tmp_path)
    try:
        result = await buyer.call_tool(
            "svc_queryAgent", {"agentUrl": impostor.url, "prompt": "pay me"}
        )
    finally:
        await asyncio.to_thread(handle.close)
    assert result.isError
    error = result.structuredContent["error"]
    assert error["code"] == "agent_url_not_registered"
    assert "nothing was paid" in error["message"]
    assert impostor.agent.flow.stats.requests == 0  # nothing sent to it
    assert await honest.burned() == 0


async def query_error(market: A2AMarket, tmp_path: Path, **params: str) -> dict[str, str]:
    buyer, handle = await buyer_of(market, tmp_path)
    try:
        result = await buyer.call_tool(
            "svc_queryAgent", {"agentUrl": market.url, "prompt": "hello there", **params}
        )
    finally:
        await asyncio.to_thread(handle.close)
    assert result.isError, result.structuredContent
    error: dict[str, str] = result.structuredContent["error"]
    return error


async def test_a_card_naming_another_agent_than_asked_is_refused(
    market: A2AMarket, tmp_path: Path
) -> None:
    error = await query_error(market, tmp_path, agentId="did:svc:someone-else")
    assert error["code"] == "agent_mismatch" and "nothing was paid" in error["message"]
    assert market.agent.flow.stats.requests == 0 and await market.burned() == 0


async def test_a_plan_the_agent_does_not_sell_is_refused(market: A2AMarket, tmp_path: Path) -> None:
    error = await query_error(market, tmp_path, planId="not-a-plan-it-sells")
    assert error["code"] == "plan_not_sold"
    assert market.agent.flow.stats.requests == 0 and await market.burned() == 0


async def test_an_agent_that_fails_charges_nothing_and_says_so(
    make_market: MarketFactory, tmp_path: Path
) -> None:
    market = await make_market(config={"agentHandler": "tests.e2e.a2a.failing:boom"})
    error = await query_error(market, tmp_path)
    assert error["code"] == "agent_error"
    assert "the agent broke" not in error["message"]  # the exception stays with the seller
    assert "nothing was charged" in error["message"]
    assert await market.burned() == 0


async def test_a_chunked_reply_without_a_length_is_cut_at_the_answer_cap() -> None:
    import httpx
    import pytest
    from aiohttp import web

    from svc_gateway.buying.capped import capped_transport
    from svc_gateway.chat.failure import ToolFailure

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(int(request.query["chunks"])):
            await response.write(b"x" * 65536)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/", chunked)
    async with (
        serve_app(app) as origin,
        httpx.AsyncClient(transport=capped_transport(1 << 20)) as http,
    ):
        small = await http.get(f"{origin}/?chunks=2")
        assert "content-length" not in small.headers and len(small.content) == 2 * 65536
        with pytest.raises(ToolFailure) as refused:
            await http.get(f"{origin}/?chunks=64")  # 4 MiB, no length
        assert refused.value.code == "answer_too_large"


async def test_an_a2a_query_asks_the_person_or_draws_on_their_mandate(
    market: A2AMarket, tmp_path: Path
) -> None:
    """Issue 41, item 1: A2A goes through the spending gate like HTTP and MCP. Without a
    mandate a query gives a code and pays nothing; a mandate of 2 cents a day (an answer is 1
    credit of a 100-credit, 1 USDC plan: 1 cent) pays exactly two answers and says it has
    nothing left; the person's own code pays one more; granted = balance + burned."""
    buyer, handle = await buyer_of(market, tmp_path, approval="human")
    ask = {"agentUrl": market.url, "prompt": "three little words"}
    try:
        asked = (await buyer.call_tool("svc_queryAgent", ask)).structuredContent
        assert asked["approvalRequired"] is True and asked["pending"]["kind"] == "query"
        assert await market.burned() == 0
        assert (await buyer.run_command("svc_allow", "0.02 USD per day")).startswith("Allowed")
        results = [(await buyer.call_tool("svc_queryAgent", ask)).structuredContent for _ in "abc"]
        assert ["answer" in r for r in results] == [True, True, False], results
        assert results[2]["approvalRequired"] is True
        assert "0.00 USD left today" in await buyer.run_command("svc_allow", "")
        assert await market.burned() == 2
        reply = await approve(buyer, results[2]["pending"]["code"])
        assert reply.startswith("Approved: agent"), reply
    finally:
        await asyncio.to_thread(handle.close)
    assert await market.burned() == 3
    assert await market.balance() + await market.burned() == GRANTED


async def test_given_the_agents_address_query_agent_pays_the_interface_its_card_names(
    make_market: MarketFactory, tmp_path: Path
) -> None:
    """Issue 43.2: an A2A agent's address (where its card is, as every A2A client starts), on a
    port of its own and on the paid endpoint's: the card there is resolved and the JSON-RPC
    interface it names is paid, one credit each; the result names the interface paid."""
    apart = await make_market()
    shared = await make_market(on_endpoint=True)
    buyer, handle = await buyer_of(apart, tmp_path)
    await apart.subscriber_client.order_plan(shared.plan_id)
    try:
        results = [
            (
                await buyer.call_tool(
                    "svc_queryAgent", {"agentUrl": address, "prompt": "three little words"}
                )
            ).structuredContent
            # the shared port's origin too, a bare address: the card at the origin names the
            # JSON-RPC interface (not the origin itself), which is paid
            for address in (apart.agent.base, shared.agent.base + "/", origin_of(shared.url))
        ]
    finally:
        await asyncio.to_thread(handle.close)
    for market, out in zip((apart, shared, shared), results, strict=True):
        assert "3 words" in out.get("answer", ""), out
        assert out["agentUrl"] == market.url and out["agentId"] == market.agent_id
        assert out["receipt"]["valid"] is True and out["tokenVersion"] == 3
    assert await apart.balance(apart.subscriber_address) == GRANTED - 1
    assert await shared.balance(apart.subscriber_address) == GRANTED - 2


async def test_given_an_address_whose_card_names_an_unregistered_interface_nothing_is_paid(
    make_market: MarketFactory, tmp_path: Path
) -> None:
    """The rule stays: the interface a card names is paid only when it is one of the agent's
    registered endpoints (an impostor serving another agent's id, reached by its address)."""
    honest = await make_market()
    impostor = await make_market()
    impostor.handle.core.agent_id = honest.agent_id  # its card claims the honest agent's id
    buyer, handle = await buyer_of(honest, tmp_path)
    try:
        result = await buyer.call_tool(
            "svc_queryAgent", {"agentUrl": impostor.agent.base, "prompt": "pay me"}
        )
    finally:
        await asyncio.to_thread(handle.close)
    error = result.structuredContent["error"]
    assert error["code"] == "agent_url_not_registered", error
    assert impostor.url in error["message"] and "nothing was paid" in error["message"]
    assert impostor.agent.flow.stats.requests == 0  # nothing sent to it
    assert await honest.burned() == 0
