"""A buyer whose connection drops after paying: svc_queryAgent asks once more with the same v3
token and the payment middleware replays the answer it paid for (charged once), over real
loopback HTTP against the sandbox."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from aiohttp import web

from svc_gateway.selling import RouteConfig, payment_middleware
from tests.support.market import MarketFactory


async def test_svc_query_agent_gets_a_lost_answer_by_asking_once_more(
    make_market: MarketFactory, tmp_path: Path
) -> None:
    market = await make_market(register_agent=False)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/ask"
    await market.register_agent(agent_url=url)
    await market.order()
    lost: list[str] = []
    handled: list[str] = []

    @web.middleware
    async def lose_the_first_answer(request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        if not lost and "payment-response" in response.headers:
            lost.append(request.headers["payment-signature"])
            assert request.transport is not None
            request.transport.close()  # paid for, and lost on the way back
        return response

    async def ask(request: web.Request) -> web.Response:
        prompt = (await request.json())["prompt"]
        handled.append(prompt)
        return web.json_response({"answer": f"{len(prompt.split())} words"})

    app = web.Application(middlewares=[lose_the_first_answer])
    settings = {
        "svcApiKey": market.builder_key,
        "environment": "local",
        "baseUrl": market.server.base_url,
        "settleQueuePath": str(tmp_path / "settle-queue.json"),
    }
    routes = {"POST /ask": RouteConfig(plan_id=market.plan_id, agent_id=market.agent_id)}
    middleware = payment_middleware(routes, settings)
    middleware.install(app)
    app.router.add_post("/ask", ask)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        result = await market.subscriber_gw.call_tool(
            "svc_queryAgent",
            {
                "agentUrl": url,
                "prompt": "how many words here",
                "planId": market.plan_id,
                "agentId": market.agent_id,
            },
        )
    finally:
        await runner.cleanup()
    assert not result.isError, result.structuredContent
    data = result.structuredContent
    assert data["tokenVersion"] == 3
    assert data["answer"] == {"answer": "4 words"}
    assert lost and handled == ["how many words here"]  # the retry was replayed, not re-run
    assert middleware.stats.replayed == 1 and middleware.stats.settled == 1
    assert await market.balance() == 8  # 10 granted, one request of 2 charged once
