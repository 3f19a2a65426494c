"""A builder selling over A2A is told to register the card's interface URLs as the agent's
endpoints, and svc_registerAgent registers them: an A2A buyer then pays the agent as is."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import TaskState

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.buying.purchase import registered_endpoints
from svc_gateway.chat.seller_notes import a2a_notes
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.sandbox import SandboxServer
from svc_gateway.selling.ways_in.a2a import PaidA2A
from svc_gateway.service.client import ServiceClient
from tests.conftest import USDC

from .conftest import message, paid, reply_text, send


async def test_svc_register_agent_registers_the_a2a_cards_interface_urls(
    sandbox: SandboxServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    builder = await sandbox.create_account("builder")
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": sandbox.base_url,
            "svcApiKey": builder["apiKey"],
            "enablePaidEndpoint": True,
            "paidEndpointPort": 0,
            "enablePaidA2A": True,
        }
    )
    store = CredentialStore(tmp_path / "builder", use_keyring=False)
    with caplog.at_level(logging.INFO, logger="svc_gateway"):
        handle = await asyncio.to_thread(svc_gateway.register, gateway, store=store)
    subscriber = await sandbox.create_account("subscriber")
    buyer = ServiceClient(sandbox.base_url, subscriber["apiKey"])
    try:
        agent: PaidA2A = handle.extras["paid_a2a"]
        agent.flow.settler.backoff = (0.0, 0.0)
        endpoint_url = handle.extras["paid_endpoint"].url
        interfaces = [agent.url, agent.rest_url]
        assert handle.core.paid_a2a_urls == interfaces
        # the start-up notes: where the agent and its card are, and what to register
        assert agent.url in caplog.text and agent.card_url in caplog.text
        (where, todo) = a2a_notes(handle.core, agent.card_url)
        assert agent.card_url in where
        assert "not selling yet" in todo and "svc_registerAgent" in todo
        assert all(url in todo for url in interfaces)

        result = await gateway.call_tool(
            "svc_registerAgent",
            {
                "name": "A2A seller",
                "agentUrl": endpoint_url,
                "planName": "A2A credits",
                "priceAmounts": ["1000000"],
                "tokenAddress": USDC,
                "creditsAmount": 10,
            },
        )
        data = result.structuredContent
        assert data["endpoints"] == [endpoint_url, *interfaces]
        assert all(url in data["a2a"] for url in interfaces)
        document = await buyer.get_agent_document(data["agentId"])
        assert [url for _verb, url in registered_endpoints(document)] == data["endpoints"]
        (_, selling) = a2a_notes(handle.core, agent.card_url)
        assert "must register" in selling and all(url in selling for url in interfaces)

        # an A2A buyer pays the agent as registered, with a token bound to the card's interface
        await buyer.order_plan(data["planId"])
        token = await buyer.get_access_token(
            data["planId"], agent_id=data["agentId"], resource_url=agent.url
        )
        async with httpx.AsyncClient(timeout=30) as http:
            card = await A2ACardResolver(http, agent.base).get_agent_card()
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
            reply = await send(client, message("registered as it should be", paid(token)))
            await client.close()
        assert reply.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(reply)
    finally:
        await buyer.aclose()
        await asyncio.to_thread(handle.close)
