"""Retries never pay twice, on the paid endpoint and on RouteConfig routes (issue 46), over
loopback against the sandbox: a paid answer lost in flight (the connection cut after the
response headers) is asked for again by svc_queryAgent with the same key and token, and comes
back the same, paid once; concurrent retries run the work once; another body under a used key
is 422 and burns nothing. Each ends with the sandbox's ledger: granted = balance + burned."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from aiohttp import web

from svc_gateway.selling import RouteConfig, payment_middleware
from svc_gateway.selling.handlers import default_handler
from svc_gateway.service.client import ServiceClient
from tests.support import serve_app, until
from tests.support.cutting import CutProxy
from tests.support.market import Market, MarketFactory


async def ledger(market: Market) -> dict[str, int]:
    async with httpx.AsyncClient(base_url=market.server.base_url) as http:
        path = f"/sandbox/ledger/{market.plan_id}/{market.subscriber_address}"
        data = (await http.get(path)).json()
    return {k: int(data[k]) for k in ("granted", "burned", "balance")}


async def conserved(market: Market, burned: int) -> None:
    books = await ledger(market)
    assert books["burned"] == burned
    assert books["granted"] == books["balance"] + books["burned"]


async def query(market: Market, url: str, prompt: str) -> dict[str, Any]:
    result = await market.subscriber_gw.call_tool(
        "svc_queryAgent",
        {"agentUrl": url, "prompt": prompt, "planId": market.plan_id, "agentId": market.agent_id},
    )
    assert not result.isError, result.structuredContent
    data: dict[str, Any] = result.structuredContent
    return data


async def v3_token(market: Market, url: str) -> str:
    client = ServiceClient(market.server.base_url, api_key=market.subscriber_key)
    try:
        token = await client.get_access_token(
            market.plan_id, agent_id=market.agent_id, resource_url=url
        )
    finally:
        await client.aclose()
    market.secrets.append(token)
    return token


def counting(runs: list[str], gate: asyncio.Event | None = None) -> Any:
    async def handler(request: dict[str, Any]) -> Any:
        runs.append(request["prompt"])
        if gate is not None:
            await gate.wait()
        return await default_handler(request)

    return handler


async def test_the_paid_endpoint_gives_a_lost_answer_back_to_its_retry_paid_once(
    make_market: MarketFactory,
) -> None:
    proxy = CutProxy(cuts=1)
    await proxy.start()
    runs: list[str] = []
    try:
        market = await make_market(
            register_agent=False,
            builder_config={"paidEndpointPublicUrl": proxy.origin},
            configure_builder=lambda gw: setattr(gw, "agent_handler", counting(runs)),
        )
        assert market.endpoint.bound_url is not None
        bound = urlsplit(market.endpoint.bound_url)
        proxy.upstream = f"{bound.scheme}://{bound.netloc}"
        await market.register_agent()
        await market.order()
        data = await query(market, market.endpoint.url, "how many words here")
    finally:
        await proxy.close()
    assert len(proxy.lost) == 1  # paid for, and lost on the way back
    assert data["retries"] == 1 and data["replayed"] is True
    assert data["receipt"]["transaction"] == proxy.lost[0]["transaction"]
    assert runs == ["how many words here"]
    assert market.endpoint.stats.replayed == 1 and market.endpoint.stats.settled == 1
    await conserved(market, burned=2)


async def test_concurrent_retries_run_once_and_a_reused_key_is_422(
    make_market: MarketFactory,
) -> None:
    gate = asyncio.Event()
    runs: list[str] = []
    market = await make_market(
        configure_builder=lambda gw: setattr(gw, "agent_handler", counting(runs, gate))
    )
    await market.order()
    token = await v3_token(market, market.endpoint.url)
    runtime = market.endpoint.flow.seller.runtime
    headers = {"payment-signature": token, "Idempotency-Key": "svc_concurrent_retry_0001"}
    async with httpx.AsyncClient(timeout=30) as http:

        async def ask(prompt: str = "same question") -> httpx.Response:
            return await http.post(market.endpoint.url, json={"prompt": prompt}, headers=headers)

        first = asyncio.create_task(ask())
        await until(lambda: bool(runs))
        retries = await asyncio.gather(ask(), ask())
        runtime.loop.call_soon_threadsafe(gate.set)
        answered = await first
        again = await ask()
        reused = await ask("another question")
    assert [r.status_code for r in retries] == [409, 409]
    assert answered.status_code == again.status_code == 200
    assert again.json() == answered.json()
    assert again.headers["payment-response"] == answered.headers["payment-response"]
    assert reused.status_code == 422 and reused.json()["error"] == "idempotency_key_reused"
    assert runs == ["same question"]
    await conserved(market, burned=2)


async def test_a_routeconfig_route_gives_a_lost_answer_back_to_its_retry_paid_once(
    make_market: MarketFactory, tmp_path: Path
) -> None:
    market = await make_market(register_agent=False)
    proxy = CutProxy(cuts=1)
    await proxy.start()
    url = proxy.origin + "/ask"
    await market.register_agent(agent_url=url)
    await market.order()
    runs: list[str] = []

    async def ask(request: web.Request) -> web.Response:
        prompt = (await request.json())["prompt"]
        runs.append(prompt)
        return web.json_response({"answer": f"{len(prompt.split())} words"})

    app = web.Application()
    settings = {
        "svcApiKey": market.builder_key,
        "environment": "local",
        "baseUrl": market.server.base_url,
        "settleQueuePath": str(tmp_path / "settle-queue.json"),
        "paidEndpointPublicUrl": proxy.origin,
    }
    routes = {"POST /ask": RouteConfig(plan_id=market.plan_id, agent_id=market.agent_id)}
    middleware = payment_middleware(routes, settings)
    middleware.install(app)
    app.router.add_post("/ask", ask)
    try:
        async with serve_app(app, access_log=None) as origin:
            proxy.upstream = origin
            data = await query(market, url, "how many words here")
            token = await v3_token(market, url)
            async with httpx.AsyncClient(timeout=30) as http:
                headers = {"payment-signature": token, "Idempotency-Key": "svc_route_key_0000001"}
                paid = await http.post(url, json={"prompt": "one"}, headers=headers)
                reused = await http.post(url, json={"prompt": "two"}, headers=headers)
    finally:
        await proxy.close()
    assert len(proxy.lost) == 1
    assert data["answer"] == {"answer": "4 words"} and data["retries"] == 1 and data["replayed"]
    assert data["receipt"]["transaction"] == proxy.lost[0]["transaction"]
    assert paid.status_code == 200 and reused.status_code == 422
    assert runs == ["how many words here", "one"]
    assert middleware.stats.replayed == 1 and middleware.stats.settled == 2
    await conserved(market, burned=4)
