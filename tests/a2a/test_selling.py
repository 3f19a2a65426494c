"""Selling over A2A 1.x, driven by the official a2a-sdk client and card resolver."""

from __future__ import annotations

import httpx
from a2a.client import A2ACardResolver
from a2a.extensions.common import find_extension_by_uri
from a2a.types import TaskState
from google.protobuf.json_format import MessageToDict

from svc_gateway.interop import a2a_x402 as x402

from .conftest import A2AMarket, message, paid, reply_text, send, status_meta


async def test_the_card_resolves_and_declares_the_payment_facts(market: A2AMarket) -> None:
    async with httpx.AsyncClient() as http:
        for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
            card = await A2ACardResolver(http, market.agent.base, path).get_agent_card()
            urls = {i.url: i.protocol_binding for i in card.supported_interfaces}
            assert urls == {market.agent.url: "JSONRPC", market.agent.rest_url: "HTTP+JSON"}
            extension = find_extension_by_uri(card, x402.X402_EXTENSION)
            assert extension is not None and extension.required
            params = MessageToDict(extension.params)
            assert params["agentId"] == market.agent_id
            assert params["planIds"] == [market.plan_id]
            assert params["creditsPerRequest"] == "1"
            assert params["scheme"] and params["network"]


async def test_unpaid_then_paid_follow_up_completes_with_a_receipt(market: A2AMarket) -> None:
    client = await market.client()
    first = await send(client, message("how long is this prompt"))
    assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    meta = status_meta(first)
    assert meta[x402.STATUS] == x402.PAYMENT_REQUIRED
    required = meta[x402.REQUIRED]
    assert required["x402Version"] == 2
    assert required["accepts"][0]["planId"] == market.plan_id
    assert await market.burned() == 0

    token = await market.token()
    second = await send(client, message("", paid(token), task_id=first.task.id))
    assert second.task.id == first.task.id
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(second)
    assert "5 words" in reply_text(second)
    meta = status_meta(second)
    assert meta[x402.STATUS] == x402.PAYMENT_COMPLETED
    (receipt,) = meta[x402.RECEIPTS]
    assert receipt["success"] is True and receipt["creditsRedeemed"] == "1"
    assert receipt["remainingBalance"] == str(GRANTED - 1)
    assert await market.burned() == 1
    await client.close()


GRANTED = 100
