"""An MCP market: the sandbox, a builder selling tools from a paid MCP server (uvicorn on
127.0.0.1), a subscriber who ordered the plan and mints v3 tokens bound to logical URIs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("mcp")

#: the official client's newest mode (revision 2026-07-28) is mcp 2.x's: not collected on 1.x
if int(version("mcp").split(".")[0]) < 2:
    collect_ignore = ["test_newest_revision.py"]

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.encoding import decode_access_token
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.interop.mcp_client import ClientSession
from svc_gateway.sandbox import SandboxServer
from svc_gateway.selling.ways_in.mcp import PaidMcp, PaidMcpServer, create_server, serve
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.service.pricing import crypto_price, dynamic_credits
from tests.support import LogCollector, leaked_secrets

USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
SERVER_NAME = "weather-srv"
GRANTED = 100


@dataclass
class McpMarket:
    sandbox: SandboxServer
    builder_client: ServiceClient
    subscriber_client: ServiceClient
    subscriber_address: str
    plan_id: str
    agent_id: str
    handle: svc_gateway.PluginHandle
    server: PaidMcpServer
    running: PaidMcp
    secrets: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.running.url

    def uri(self, name: str, kind: str = "tools") -> str:
        return f"mcp://{SERVER_NAME}/{kind}/{name}"

    async def token(self, name: str, kind: str = "tools") -> str:
        token = await self.subscriber_client.get_access_token(
            self.plan_id, agent_id=self.agent_id, resource_url=self.uri(name, kind)
        )
        self.secrets.append(token)
        return token

    async def payment(self, name: str, kind: str = "tools") -> tuple[str, dict[str, Any]]:
        """A fresh token and the ``_meta`` that carries it in band."""
        token = await self.token(name, kind)
        payload = decode_access_token(token)
        assert payload is not None
        return token, {"x402/payment": payload}

    async def balance(self) -> int:
        return (
            await self.subscriber_client.get_plan_balance(self.plan_id, self.subscriber_address)
        ).balance

    async def burned(self) -> int:
        return GRANTED - await self.balance()

    def session(self, bearer: str | None) -> ClientSession:
        return ClientSession(self.url, bearer, timeout=30)


McpMarketFactory = Callable[..., Awaitable[McpMarket]]


def secret_forms(secret: str) -> list[str]:
    """A key or token, and (for a token) the signature its decoded ``_meta`` form carries."""
    forms = [secret]
    payload = (decode_access_token(secret) or {}).get("payload")
    signature = payload.get("signature") if isinstance(payload, dict) else None
    if isinstance(signature, str) and len(signature) >= 16:
        forms.append(signature)
    return forms


@pytest.fixture
async def make_mcp_market(
    sandbox: SandboxServer, tmp_path: Path
) -> AsyncIterator[McpMarketFactory]:
    """Markets; at teardown, no API key, token or token signature reached any log line (the
    root logger at DEBUG, so the SDK's own message logs are included)."""
    made: list[tuple[McpMarket, ServiceClient, ServiceClient]] = []
    root = logging.getLogger()
    collector, level = LogCollector(), root.level
    root.addHandler(collector)
    root.setLevel(logging.DEBUG)

    async def factory(
        *,
        min_credits: int = 1,
        max_credits: int = 10,
        transport: Any = None,
        plan_in_config: bool = True,
        config: dict[str, Any] | None = None,
        endpoints: list[str] | None = None,
    ) -> McpMarket:
        builder = await sandbox.create_account("builder")
        subscriber = await sandbox.create_account("subscriber")
        builder_client = ServiceClient(sandbox.base_url, builder["apiKey"])
        subscriber_client = ServiceClient(sandbox.base_url, subscriber["apiKey"])
        plan_id = await builder_client.register_plan(
            PlanMetadata(name="MCP credits"),
            crypto_price([1_000_000], [builder["address"]], USDC),
            dynamic_credits(GRANTED, min_credits, max_credits),
        )
        uris = endpoints or [
            f"mcp://{SERVER_NAME}/{kind}/*" for kind in ("tools", "resources", "prompts")
        ]
        agent_id = await builder_client.register_agent(
            AgentMetadata(name="Weather MCP"),
            AgentApi(endpoints=[{"POST": uri} for uri in uris]),
            [plan_id],
        )
        await subscriber_client.order_plan(plan_id)
        gateway = ReferenceGateway(
            {
                "environment": "local",
                "baseUrl": sandbox.base_url,
                "svcApiKey": builder["apiKey"],
                **({"planId": plan_id} if plan_in_config else {}),
                "agentId": agent_id,
                **(config or {}),
            }
        )
        handle = await asyncio.to_thread(
            svc_gateway.register,
            gateway,
            session_factory=transport,
            store=CredentialStore(tmp_path / f"mcp-{len(made)}", use_keyring=False),
        )
        server = create_server(handle.core, server_name=SERVER_NAME)
        server.flow.settler.backoff = (0.0, 0.0)  # no real sleeps between settle attempts
        running = await handle.runtime.run(serve(server, host="127.0.0.1", port=0))
        # The server's own URL is an endpoint too: the OAuth server issues tokens only for a
        # resource registered to the agent its metadata names (RFC 8707).
        async with httpx.AsyncClient(base_url=sandbox.base_url, timeout=30) as http:
            updated = await http.put(
                f"/protocol/agents/{agent_id}",
                json={
                    "metadataAttributes": {"name": "Weather MCP"},
                    "agentApiAttributes": {
                        "endpoints": [{"POST": uri} for uri in [*uris, running.url]]
                    },
                },
                headers={"Authorization": f"Bearer {builder['apiKey']}"},
            )
        assert updated.status_code == 200, updated.text
        market = McpMarket(
            sandbox,
            builder_client,
            subscriber_client,
            subscriber["address"],
            plan_id,
            agent_id,
            handle,
            server,
            running,
            secrets=[builder["apiKey"], subscriber["apiKey"]],
        )
        made.append((market, builder_client, subscriber_client))
        return market

    try:
        yield factory
    finally:
        for market, builder_client, subscriber_client in made:
            await market.handle.runtime.run(market.running.close())
            await asyncio.to_thread(market.handle.close)
            await builder_client.aclose()
            await subscriber_client.aclose()
        root.removeHandler(collector)
        root.setLevel(level)
    text = collector.text
    for market, _b, _s in made:
        for secret in market.secrets:
            for form in secret_forms(secret):
                assert form not in text, "an API key, token or signature reached the log"
    assert not leaked_secrets(text), "something shaped like a key or token reached the log"


@pytest.fixture
async def mcp_market(make_mcp_market: McpMarketFactory) -> McpMarket:
    return await make_mcp_market()


BuyerFactory = Callable[..., Awaitable[ReferenceGateway]]


@pytest.fixture
async def make_buyer(tmp_path: Path) -> AsyncIterator[BuyerFactory]:
    """The subscriber's own gateway (a second plugin), logged in with the subscriber's key."""
    handles: list[svc_gateway.PluginHandle] = []

    async def factory(market: McpMarket, **config: Any) -> ReferenceGateway:
        gateway = ReferenceGateway(
            {
                "environment": "local",
                "baseUrl": market.sandbox.base_url,
                "svcApiKey": market.secrets[1],
                "approval": "model",  # these buyers test MCP buying; approvals have their own
                **config,
            }
        )
        store = CredentialStore(tmp_path / f"buyer-{len(handles)}", use_keyring=False)
        handles.append(await asyncio.to_thread(svc_gateway.register, gateway, store=store))
        return gateway

    yield factory
    for handle in handles:
        await asyncio.to_thread(handle.close)


@pytest.fixture
async def buyer(mcp_market: McpMarket, make_buyer: BuyerFactory) -> ReferenceGateway:
    return await make_buyer(mcp_market)
