"""svc_queryAgent paying an A2A agent with the official a2a-sdk client, from a second gateway."""

from __future__ import annotations

import asyncio
from pathlib import Path

import svc_gateway
from svc_gateway.chat.credentials import CredentialStore
from svc_gateway.hosts.reference import ReferenceGateway

from .conftest import GRANTED, A2AMarket, MarketFactory


async def buyer_of(
    market: A2AMarket, tmp_path: Path
) -> tuple[ReferenceGateway, svc_gateway.PluginHandle]:
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": market.sandbox.base_url,
            "svcApiKey": market.subscriber_key,
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
