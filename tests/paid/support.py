"""Helpers for the paid tests: a market over real loopback HTTP (the local sandbox, a builder
gateway serving the paid endpoint, and a subscriber gateway). Faults the sandbox cannot produce
are injected with an httpx transport wrapped around the real one (the builder's client only)."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from svc_gateway import PluginHandle
from svc_gateway.client import ServiceClient
from svc_gateway.embedded import DEMO_TOKEN
from svc_gateway.encoding import decode_b64_json
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.paid import PaidEndpoint
from svc_gateway.paid.handlers import default_handler
from svc_gateway.sandbox import SandboxServer, start_sandbox

Fault = Callable[[httpx.Request, httpx.AsyncBaseTransport], Awaitable[httpx.Response]]


class FaultyTransport(httpx.AsyncBaseTransport):
    """The real transport, counting calls per API path and applying scripted faults."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.calls: Counter[str] = Counter()
        self.faults: dict[str, list[Fault]] = {}
        self.always: dict[str, Fault] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.split("/api/v1/", 1)[-1]
        self.calls[path] += 1
        queue = self.faults.get(path)
        if queue:
            return await queue.pop(0)(request, self.inner)
        if path in self.always:
            return await self.always[path](request, self.inner)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def answer_lost_500(
    request: httpx.Request, inner: httpx.AsyncBaseTransport
) -> httpx.Response:
    """The service did the work, but its answer never arrived: a 500 instead."""
    response = await inner.handle_async_request(request)
    await response.aread()
    await response.aclose()
    return httpx.Response(500, json={"code": "TEST.LOST", "message": "answer lost"})


async def answer_lost_reset(
    request: httpx.Request, inner: httpx.AsyncBaseTransport
) -> httpx.Response:
    """The service did the work, then the connection dropped."""
    response = await inner.handle_async_request(request)
    await response.aread()
    await response.aclose()
    raise httpx.ReadError("connection reset", request=request)


async def refuse_500(request: httpx.Request, inner: httpx.AsyncBaseTransport) -> httpx.Response:
    return httpx.Response(500, json={"code": "TEST.DOWN", "message": "internal error"})


async def connect_error(request: httpx.Request, inner: httpx.AsyncBaseTransport) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


async def unauthorized(request: httpx.Request, inner: httpx.AsyncBaseTransport) -> httpx.Response:
    return httpx.Response(401, json={"code": "BCK.APIKEY.0004", "message": "invalid API key"})


async def settle_success_false(
    request: httpx.Request, inner: httpx.AsyncBaseTransport
) -> httpx.Response:
    return httpx.Response(200, json={"success": False, "errorReason": "ledger busy"})


async def scripted_handler(request: dict[str, Any]) -> Any:
    """The builder's agent, steered by the prompt: ``status:404``, ``raise``, ``unserialisable``."""
    prompt = request["prompt"]
    if prompt.startswith("status:"):
        return int(prompt.split(":", 1)[1]), {"error": "handler said no"}
    if prompt == "raise":
        raise RuntimeError("the agent broke")
    if prompt == "unserialisable":
        return {"value": object()}
    return await default_handler(request)


@dataclass
class Market:
    server: SandboxServer
    builder_gw: ReferenceGateway
    builder: PluginHandle
    endpoint: PaidEndpoint
    subscriber_gw: ReferenceGateway
    subscriber: PluginHandle
    builder_key: str
    subscriber_key: str
    subscriber_address: str
    plan_id: str = ""
    agent_id: str = ""
    transport: FaultyTransport | None = None
    secrets: list[str] = field(default_factory=list)

    async def token(self) -> str:
        result = await self.subscriber_gw.call_tool(
            "svc_getAccessToken", {"planId": self.plan_id, "agentId": self.agent_id}
        )
        assert not result.isError, result.structuredContent
        token = str(result.structuredContent["accessToken"])
        self.secrets.append(token)
        return token

    async def order(self) -> None:
        result = await self.subscriber_gw.call_tool(
            "svc_orderPlan", {"planId": self.plan_id, "confirm": True}
        )
        assert not result.isError, result.structuredContent

    async def balance(self) -> int:
        client = ServiceClient(self.server.base_url)
        try:
            return (await client.get_plan_balance(self.plan_id, self.subscriber_address)).balance
        finally:
            await client.aclose()

    async def register_agent(
        self, credits: int = 10, per_request: int = 2, agent_url: str | None = None
    ) -> None:
        result = await self.builder_gw.call_tool(
            "svc_registerAgent",
            {
                "name": "Test agent",
                "agentUrl": agent_url or self.endpoint.url,
                "planName": "Test credits",
                "priceAmounts": [1_000_000],
                "tokenAddress": DEMO_TOKEN,
                "creditsAmount": credits,
                "creditsPerRequest": per_request,
            },
        )
        assert not result.isError, result.structuredContent
        self.plan_id = str(result.structuredContent["planId"])
        self.agent_id = str(result.structuredContent["agentId"])


MarketFactory = Callable[..., Awaitable[Market]]


class LogCollector(logging.Handler):
    """Every formatted log line of a test (setup to teardown, any thread, tracebacks too)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


# every API key and access token starts with base64 '{"'; so do the (public) payment headers
_B64_JSON = re.compile(r"eyJ[A-Za-z0-9_+/=.-]{8,}")


def leaked_secrets(text: str) -> list[str]:
    """Base64-JSON strings in ``text`` that are not a payment envelope or receipt (which are
    public, and which httpcore's debug log shows as response headers)."""
    leaks = []
    for match in _B64_JSON.findall(text):
        parts = match.split(".")
        decoded = decode_b64_json(parts[1] if len(parts) == 3 else match)
        if decoded is not None and ("accepts" in decoded or "creditsRedeemed" in decoded):
            continue
        leaks.append(match[:12] + "...")
    return leaks


@pytest.fixture
async def sandbox() -> AsyncIterator[SandboxServer]:
    server = await start_sandbox()
    yield server
    await server.close()
