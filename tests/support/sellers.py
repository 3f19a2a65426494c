"""A builder selling routes of its own aiohttp app through the payment middleware, against the
local sandbox over real loopback HTTP: two plans (fixed 2 credits, dynamic 1..5), a buyer with
both ordered, and the app served on a socket bound before the routes are configured (so a
v3 token can be bound to the route's real URL)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from svc_gateway.hosts.embedded import DEMO_TOKEN
from svc_gateway.sandbox import SandboxServer
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.service.pricing import dynamic_credits, erc20_price, fixed_credits
from tests.support import LogCollector, leaked_secrets


@dataclass
class Seller:
    sandbox: SandboxServer
    builder: ServiceClient
    buyer: ServiceClient
    builder_key: str
    buyer_key: str
    buyer_address: str
    fixed_plan: str = ""
    fixed_agent: str = ""
    dynamic_plan: str = ""
    dynamic_agent: str = ""
    sock: socket.socket | None = None
    origin: str = ""
    runner: web.AppRunner | None = None
    secrets: list[str] = field(default_factory=list)
    queue_path: str = ""

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The plugin config keys a builder passes to the middleware."""
        return {
            "svcApiKey": self.builder_key,
            "environment": "local",
            "baseUrl": self.sandbox.base_url,
            "settleQueuePath": self.queue_path,
            **extra,
        }

    async def token(
        self, plan: str, agent: str, url: str | None = None, *, top_up: bool = True
    ) -> str:
        """A v2 token, or a v3 one bound to ``url`` (POST) when given. ``top_up=False``: its
        delegation (1 cent) cannot buy more credits at settle."""
        limit = 10_000 if top_up else 1
        token = await self.buyer.get_access_token(
            plan, agent_id=agent, resource_url=url, spending_limit_cents=limit
        )
        self.secrets.append(token)
        return token

    async def ledger(self, plan: str) -> dict[str, int]:
        async with httpx.AsyncClient(base_url=self.sandbox.base_url) as http:
            data = (await http.get(f"/sandbox/ledger/{plan}/{self.buyer_address}")).json()
        return {k: int(data[k]) for k in ("granted", "burned", "balance", "expired")}

    async def serve(self, app: web.Application) -> str:
        assert self.sock is not None
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.SockSite(self.runner, self.sock).start()
        return self.origin


async def register(
    seller: Seller, credits: Any, endpoints: list[dict[str, str]] | None
) -> tuple[str, str]:
    ids = await seller.builder.register_agent_and_plan(
        AgentMetadata(name="Route seller"),
        AgentApi(endpoints=endpoints),
        PlanMetadata(name="Route plan"),
        erc20_price([1_000_000], [seller.builder.address or ""], DEMO_TOKEN),
        credits,
    )
    await seller.buyer.order_plan(ids.plan_id)
    return ids.plan_id, ids.agent_id


SellerFactory = Callable[..., Any]


@pytest.fixture(name="make_seller")
async def make_seller_fixture(
    sandbox: SandboxServer, all_logs: LogCollector, tmp_path: Path
) -> AsyncIterator[SellerFactory]:
    made: list[Seller] = []

    async def factory(endpoints: Callable[[str], list[dict[str, str]]] | None = None) -> Seller:
        b = await sandbox.create_account("builder")
        s = await sandbox.create_account("buyer")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        origin = f"http://127.0.0.1:{sock.getsockname()[1]}"
        seller = Seller(
            sandbox=sandbox,
            builder=ServiceClient(sandbox.base_url, b["apiKey"], environment="local"),
            buyer=ServiceClient(sandbox.base_url, s["apiKey"], environment="local"),
            builder_key=b["apiKey"],
            buyer_key=s["apiKey"],
            buyer_address=s["address"],
            sock=sock,
            origin=origin,
            secrets=[b["apiKey"], s["apiKey"]],
            queue_path=str(tmp_path / f"settle-queue-{len(made)}.json"),
        )
        made.append(seller)
        allowed = endpoints(origin) if endpoints else None
        seller.fixed_plan, seller.fixed_agent = await register(
            seller, fixed_credits(10, 2), allowed
        )
        seller.dynamic_plan, seller.dynamic_agent = await register(
            seller, dynamic_credits(20, 1, 5), allowed
        )
        return seller

    yield factory
    for seller in made:
        if seller.runner is not None:
            await seller.runner.cleanup()
        elif seller.sock is not None:
            seller.sock.close()
        await seller.builder.aclose()
        await seller.buyer.aclose()
    text = all_logs.text
    for seller in made:
        for secret in seller.secrets:
            assert secret not in text, "an API key or access token reached the log"
    assert not leaked_secrets(text), "something shaped like a key or token reached the log"
