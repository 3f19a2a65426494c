"""Markets for the selling, buying and approval tests: a market over real loopback HTTP (the
local sandbox, a builder gateway serving the paid endpoint, and a subscriber gateway). Faults
the sandbox cannot produce are injected by a loopback proxy in front of the sandbox (the
builder's client only), so they do not depend on the HTTP library the client uses."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
from aiohttp import web

from svc_gateway import PluginHandle
from svc_gateway.encoding import decode_b64_json
from svc_gateway.hosts.embedded import DEMO_TOKEN
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.sandbox import SandboxServer
from svc_gateway.selling import PaidEndpoint
from svc_gateway.selling.handlers import default_handler
from svc_gateway.service.client import ServiceClient
from tests.support.stub_service import make_token

#: a fault answers one proxied call: it may forward it (``call.forward()``) and then lie
Fault = Callable[["ProxyCall"], Awaitable[web.StreamResponse]]


@dataclass
class ProxyCall:
    """One request the builder's client sent, as the fault proxy received it."""

    request: web.Request
    body: bytes
    upstream: str
    session: aiohttp.ClientSession

    async def forward(self) -> web.Response:
        """Send it on to the sandbox and return the sandbox's answer."""
        headers = {
            k: v
            for k, v in self.request.headers.items()
            if k.lower() not in ("host", "content-length", "transfer-encoding", "connection")
        }
        async with self.session.request(
            self.request.method,
            self.upstream + self.request.path_qs,
            data=self.body,
            headers=headers,
            allow_redirects=False,
        ) as answer:
            data = await answer.read()
            kept = {
                k: v
                for k, v in answer.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "date")
            }
            return web.Response(status=answer.status, body=data, headers=kept)

    def drop(self) -> web.Response:
        """Close the connection without an answer (the client sees a transport error)."""
        transport = self.request.transport
        if transport is not None:
            transport.close()
        return web.Response(status=599)  # never written: the connection is gone


class FaultProxy:
    """A loopback HTTP proxy in front of the sandbox, for the builder's client only: counts
    calls per API path and applies scripted faults. It works with any HTTP client library."""

    def __init__(self, upstream_origin: str) -> None:
        self.upstream = upstream_origin
        self.calls: Counter[str] = Counter()
        self.faults: dict[str, list[Fault]] = {}
        self.always: dict[str, Fault] = {}
        self.base_url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        self._session = aiohttp.ClientSession()
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/api/v1"
        return self.base_url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        path = request.path.split("/api/v1/", 1)[-1]
        self.calls[path] += 1
        call = ProxyCall(request, await request.read(), self.upstream, self._session)
        queue = self.faults.get(path)
        if queue:
            return await queue.pop(0)(call)
        if path in self.always:
            return await self.always[path](call)
        return await call.forward()


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"code": code, "message": message}, status=status)


async def answer_lost_500(call: ProxyCall) -> web.StreamResponse:
    """The service did the work, but its answer never arrived: a 500 instead."""
    await call.forward()
    return _error(500, "TEST.LOST", "answer lost")


async def answer_lost_reset(call: ProxyCall) -> web.StreamResponse:
    """The service did the work, then the connection dropped."""
    await call.forward()
    return call.drop()


async def refuse_500(call: ProxyCall) -> web.StreamResponse:
    return _error(500, "TEST.DOWN", "internal error")


async def connect_error(call: ProxyCall) -> web.StreamResponse:
    """No answer at all: the connection is closed (a transport error for the client)."""
    return call.drop()


async def unauthorized(call: ProxyCall) -> web.StreamResponse:
    return _error(401, "BCK.APIKEY.0004", "invalid API key")


async def settle_success_false(call: ProxyCall) -> web.StreamResponse:
    return web.json_response({"success": False, "errorReason": "ledger busy"})


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
    builder_address: str = ""
    transport: FaultProxy | None = None
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


# -- helpers of the money-safety tests ---------------------------------------------------------

#: the payer of the stub's tokens in the money-safety tests
STUB_PAYER = "0x" + "aa" * 20
#: the service rejects the seller's own key: settles are queued (retried without backoff)
OWN_KEY_REJECTED = (401, {"code": "BCK.APIKEY.0004", "message": "invalid API key"})


def redeemed(responses: list[httpx.Response]) -> int:
    """Credits burned, as the receipts the buyer holds say."""
    total = 0
    for response in responses:
        receipt = decode_b64_json(response.headers.get("payment-response"))
        if receipt is not None:
            total += int(receipt["creditsRedeemed"])
    return total


async def paid_post(
    http: httpx.AsyncClient, url: str, prompt: str = "hi", payer: str = STUB_PAYER
) -> httpx.Response:
    return await http.post(
        url, json={"prompt": prompt}, headers={"payment-signature": make_token(payer)}
    )
