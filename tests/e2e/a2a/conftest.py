"""An A2A market: the sandbox, a builder gateway selling its agent over A2A 1.x (the official
a2a-sdk server on 127.0.0.1), a subscriber who ordered the plan, and the official a2a-sdk client.

Runs where a2a-sdk 1.x is installed (the ``a2a`` extra; CI's second environment, since the test
extra's payments-py pins a2a-sdk 0.3)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("a2a.helpers", reason="a2a-sdk 1.x is not installed (the a2a extra)")

import httpx
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.encoding import decode_access_token
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.interop import a2a_x402 as x402
from svc_gateway.sandbox import SandboxServer
from svc_gateway.selling.ways_in.a2a import PaidA2A
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.service.pricing import crypto_price, dynamic_credits
from tests.conftest import USDC, make_plan

GRANTED = 100


@dataclass
class A2AMarket:
    sandbox: SandboxServer
    builder_client: ServiceClient
    subscriber_client: ServiceClient
    subscriber_key: str
    subscriber_address: str
    plan_id: str
    agent_id: str
    handle: svc_gateway.PluginHandle
    agent: PaidA2A
    gateway: ReferenceGateway

    @property
    def url(self) -> str:
        return self.agent.url

    async def token(self, url: str | None = None, client: ServiceClient | None = None) -> str:
        return await (client or self.subscriber_client).get_access_token(
            self.plan_id, agent_id=self.agent_id, resource_url=url or self.url
        )

    async def balance(self, address: str | None = None) -> int:
        answer = await self.subscriber_client.get_plan_balance(
            self.plan_id, address or self.subscriber_address
        )
        return answer.balance

    async def burned(self) -> int:
        return GRANTED - await self.balance()

    async def client(self, **config: Any) -> Any:
        http = httpx.AsyncClient(timeout=30)
        card = await A2ACardResolver(http, self.agent.base).get_agent_card()
        factory = ClientFactory(ClientConfig(httpx_client=http, **{"streaming": False, **config}))
        return factory.create(card)


MarketFactory = Callable[..., Awaitable[A2AMarket]]


def message(text: str, metadata: dict[str, Any] | None = None, task_id: str = "") -> Message:
    return Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[Part(text=text)] if text else [Part(text="(payment)")],
        metadata=metadata,
        task_id=task_id,
    )


def paid(token: str) -> dict[str, Any]:
    payload = decode_access_token(token)
    assert payload is not None
    return {x402.STATUS: x402.PAYMENT_SUBMITTED, x402.PAYLOAD: payload}


async def send(client: Any, msg: Message, headers: dict[str, str] | None = None) -> StreamResponse:
    """One blocking send with the official client; its only reply."""
    context = ClientCallContext(service_parameters=headers or {}, timeout=30)
    replies = [
        r async for r in client.send_message(SendMessageRequest(message=msg), context=context)
    ]
    assert len(replies) == 1, replies
    return replies[0]


def status_meta(reply: StreamResponse) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(reply.task.status.message.metadata)


def reply_text(reply: StreamResponse) -> str:
    return "\n".join(p.text for p in reply.task.status.message.parts if p.HasField("text"))


@pytest.fixture
async def make_market(sandbox: SandboxServer, tmp_path: Path) -> AsyncIterator[MarketFactory]:
    made: list[A2AMarket] = []

    async def factory(
        *,
        per_request: int = 1,
        config: dict[str, Any] | None = None,
        transport: Any = None,
        credits: Callable[[dict[str, Any]], int] | None = None,
        dynamic: tuple[int, int] | None = None,
        on_endpoint: bool = False,
    ) -> A2AMarket:
        """``on_endpoint``: the paid endpoint on too, and A2A on its port (paidA2APort unset)."""
        builder = await sandbox.create_account("builder")
        subscriber = await sandbox.create_account("subscriber")
        builder_client = ServiceClient(sandbox.base_url, builder["apiKey"])
        subscriber_client = ServiceClient(sandbox.base_url, subscriber["apiKey"])
        if dynamic is None:
            plan_id = await make_plan(
                builder_client, builder["address"], credits=GRANTED, per_request=per_request
            )
        else:  # credits per request between dynamic[0] and dynamic[1]
            plan_id = await builder_client.register_plan(
                PlanMetadata(name="Dynamic"),
                crypto_price([1_000_000], [builder["address"]], USDC),
                dynamic_credits(GRANTED, *dynamic),
            )
        await subscriber_client.order_plan(plan_id)
        gateway = ReferenceGateway(
            {
                "environment": "local",
                "baseUrl": sandbox.base_url,
                "svcApiKey": builder["apiKey"],
                "planId": plan_id,
                "enablePaidA2A": True,
                **(
                    {"enablePaidEndpoint": True, "paidEndpointPort": 0}
                    if on_endpoint
                    else {"paidA2APort": 0}
                ),
                **(config or {}),
            }
        )
        if credits is not None:  # the host's per-request price, as the paid endpoint uses
            gateway.credits_for_request = credits  # type: ignore[attr-defined]
        store = CredentialStore(tmp_path / f"a2a-{len(made)}", use_keyring=False)
        handle = await asyncio.to_thread(
            svc_gateway.register, gateway, store=store, session_factory=transport
        )
        agent: PaidA2A = handle.extras["paid_a2a"]
        agent.flow.settler.backoff = (0.0, 0.0)
        endpoints = [{"POST": agent.url}, {"POST": agent.rest_url}]
        if "paid_endpoint" in handle.extras:
            endpoints.append({"POST": handle.extras["paid_endpoint"].url})
        agent_id = await builder_client.register_agent(
            AgentMetadata(name="A2A seller"), AgentApi(endpoints=endpoints), [plan_id]
        )
        handle.core.agent_id = agent_id
        market = A2AMarket(
            sandbox,
            builder_client,
            subscriber_client,
            subscriber["apiKey"],
            subscriber["address"],
            plan_id,
            agent_id,
            handle,
            agent,
            gateway,
        )
        made.append(market)
        return market

    try:
        yield factory
    finally:
        for market in made:
            await asyncio.to_thread(market.handle.close)
            await market.builder_client.aclose()
            await market.subscriber_client.aclose()


@pytest.fixture
async def market(make_market: MarketFactory) -> A2AMarket:
    return await make_market()
