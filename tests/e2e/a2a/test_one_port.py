"""The paid A2A agent on the paid endpoint's own port: one server, one agent card at the origin
(a 1.x client follows its interfaces, a 0.3 client its ``url``: JSON-RPC) and the endpoint's own
card (an HTTP buyer follows its ``url``: the endpoint); a port of its own when asked for one."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientCallContext
from a2a.extensions.common import find_extension_by_uri
from a2a.types import SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.config import ConfigError
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.interop import a2a_x402 as x402
from svc_gateway.sandbox import SandboxServer

from .conftest import MarketFactory, message, paid, reply_text, send


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


async def test_unset_paid_a2a_port_serves_a2a_and_one_card_on_the_endpoints_port(
    make_market: MarketFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="svc_gateway"):
        market = await make_market(on_endpoint=True)
    endpoint = market.handle.extras["paid_endpoint"]
    assert market.agent.base == origin(endpoint.url)  # one port
    logged = caplog.text
    assert market.agent.url in logged and market.agent.card_url in logged

    async with httpx.AsyncClient(timeout=30) as http:
        paths = ("/.well-known/agent-card.json", "/.well-known/agent.json")
        documents = [(await http.get(market.agent.base + path)).json() for path in paths]
        card = await A2ACardResolver(http, market.agent.base).get_agent_card()
        own = (await http.get(endpoint.url + "/.well-known/agent.json")).json()
    first = documents[0]
    assert documents[1] == first  # one document at the origin
    # the 0.3 fields name the JSON-RPC interface (a 0.3 client posts to ``url``) ...
    assert first["url"] == market.agent.url
    assert first["preferredTransport"] == "JSONRPC" and first["protocolVersion"] == "0.3.0"
    # ... beside the HTTP endpoint's payment facts ...
    assert first["agentId"] == market.agent_id and first["planId"] == market.plan_id
    assert first["schemes"] and first["x402Version"] == 2
    # ... and the A2A interfaces, which the official resolver reads from the same document
    versions = {(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces}
    assert versions == {
        (market.agent.url, "JSONRPC", "1.0"),
        (market.agent.rest_url, "HTTP+JSON", "1.0"),
        (market.agent.url, "JSONRPC", "0.3.0"),
    }
    extension = find_extension_by_uri(card, x402.X402_EXTENSION)
    assert extension is not None
    assert MessageToDict(extension.params)["agentId"] == market.agent_id
    # the endpoint's own card, where an HTTP buyer given the endpoint looks, names the endpoint
    assert own["url"] == endpoint.url and "supportedInterfaces" not in own
    assert own["agentId"] == market.agent_id

    client = await market.client()
    unpaid = await send(client, message("over the shared port"))
    assert unpaid.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    done = await send(client, message("", paid(await market.token()), task_id=unpaid.task.id))
    assert done.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(done)
    await client.close()
    streaming = await market.client(streaming=True)  # SSE through the endpoint's server too
    request = SendMessageRequest(message=message("streamed", paid(await market.token())))
    events = [
        e async for e in streaming.send_message(request, context=ClientCallContext(timeout=30))
    ]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    await streaming.close()
    async with httpx.AsyncClient(timeout=30) as http:  # an HTTP buyer follows the endpoint card
        token = await market.token(url=endpoint.url)
        answer = await http.post(
            own["url"], json={"prompt": "and over HTTP"}, headers={"payment-signature": token}
        )
    assert answer.status_code == 200, answer.text
    assert await market.burned() == 3


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_paid_a2a_port_equal_to_the_endpoints_shares_it_and_zero_gets_its_own(
    make_market: MarketFactory,
) -> None:
    port = free_port()
    same = await make_market(
        on_endpoint=True, config={"paidEndpointPort": port, "paidA2APort": port}
    )
    assert same.agent.base == origin(same.handle.extras["paid_endpoint"].url)
    assert urlsplit(same.agent.base).port == port

    apart = await make_market(on_endpoint=True, config={"paidA2APort": 0})
    endpoint = apart.handle.extras["paid_endpoint"]
    assert apart.agent.base != origin(endpoint.url)
    client = await apart.client()
    reply = await send(client, message("on a port of its own", paid(await apart.token())))
    assert reply.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(reply)
    await client.close()
    async with httpx.AsyncClient(timeout=30) as http:  # the endpoint keeps its own card
        card = (await http.get(origin(endpoint.url) + "/.well-known/agent.json")).json()
    assert card["url"] == endpoint.url and "supportedInterfaces" not in card
    async with httpx.AsyncClient(timeout=30) as http:  # the A2A card's 0.3 url: its JSON-RPC
        a2a_card = (await http.get(apart.agent.card_url)).json()
    assert a2a_card["url"] == apart.agent.url and a2a_card["preferredTransport"] == "JSONRPC"


async def test_an_endpoint_path_overlapping_the_a2a_paths_is_refused_at_start(
    sandbox: SandboxServer, tmp_path: Path
) -> None:
    builder = await sandbox.create_account("builder")
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": sandbox.base_url,
            "svcApiKey": builder["apiKey"],
            "enablePaidEndpoint": True,
            "paidEndpointPort": 0,
            "agentEndpointPath": "/a2a",
            "enablePaidA2A": True,
        }
    )
    store = CredentialStore(tmp_path / "overlap", use_keyring=False)
    with pytest.raises(ConfigError, match="overlaps the A2A agent's paths"):
        await asyncio.to_thread(svc_gateway.register, gateway, store=store)
