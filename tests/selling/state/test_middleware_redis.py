"""The payment middleware with ``stateUrl``: apps built by ``build_payment_app`` share one
admission book, settle store and stats through a real ``redis-server``, over real loopback
HTTP against the local sandbox (conservation checked on its ledger)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from svc_gateway.selling import PAYMENTS, RouteConfig, build_payment_app
from tests.support.redis_server import RedisServer
from tests.support.sellers import Seller, SellerFactory, make_seller_fixture  # noqa: F401

ROUTE = "/runs/wait"


def replica(seller: Seller, state_url: str, spool: Path, runs: list[str]) -> web.Application:
    """One replica of the builder's app selling ``POST /runs/wait`` on the fixed plan."""
    route = RouteConfig(plan_id=seller.fixed_plan, agent_id=seller.fixed_agent)
    settings = seller.settings(stateUrl=state_url, settleQueuePath=str(spool))
    app = build_payment_app({f"POST {ROUTE}": route}, settings)

    async def run_wait(request: web.Request) -> web.Response:
        data = await request.json()
        runs.append(str(data["n"]))
        await asyncio.sleep(0.05)  # long enough for the burst to overlap on both replicas
        return web.json_response({"echo": data})

    app.router.add_post(ROUTE, run_wait)
    return app


@asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    """``app`` on a free 127.0.0.1 port; yields its origin, cleans the app up after."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()


async def test_two_middleware_replicas_on_one_redis_admit_exactly_what_the_payer_holds(
    make_seller: SellerFactory, redis_server: RedisServer, tmp_path: Path
) -> None:
    seller: Seller = await make_seller()
    token = await seller.token(seller.fixed_plan, seller.fixed_agent, top_up=False)
    runs: list[str] = []
    a = replica(seller, redis_server.url, tmp_path / "a.json", runs)
    b = replica(seller, redis_server.url, tmp_path / "b.json", runs)
    assert a[PAYMENTS].shared is not None and b[PAYMENTS].shared is not None
    async with served(a) as origin_a, served(b) as origin_b, httpx.AsyncClient() as http:
        origins = [origin_a, origin_b]
        answers = await asyncio.gather(
            *(
                http.post(
                    origins[i % 2] + ROUTE, json={"n": i}, headers={"payment-signature": token}
                )
                for i in range(8)
            )
        )
        statuses = sorted(a.status_code for a in answers)
        # 10 credits at 2 each across both replicas: 5 answers, 3 refused before the handler
        assert statuses == [200] * 5 + [402] * 3
        assert len(runs) == 5
        assert all("payment-response" in r.headers for r in answers if r.status_code == 200)
        shared = a[PAYMENTS].shared
        assert shared is not None
        assert await shared.book.known(seller.fixed_plan, seller.buyer_address) == (0, 0)
    # both replicas pushed their counters when their apps closed
    totals = await shared_totals(redis_server.url, seller)
    assert totals["settled"] == 5 and totals["refused"] == 3
    ledger = await seller.ledger(seller.fixed_plan)
    assert ledger == {"granted": 10, "burned": 10, "balance": 0, "expired": 0}


async def shared_totals(url: str, seller: Seller) -> dict[str, Any]:
    """The counters every replica of ``seller`` pushed (its own namespace on that Redis)."""
    from svc_gateway.selling.state.redis_store import SharedStats, connect_client, seller_prefix

    client = connect_client(url)
    try:
        prefix = seller_prefix(seller.builder.address)
        return await SharedStats(client, where="test", prefix=prefix).totals()
    finally:
        await client.aclose()


async def test_a_middleware_whose_redis_is_down_answers_503_before_the_handler(
    make_seller: SellerFactory, redis_server: RedisServer, tmp_path: Path
) -> None:
    seller: Seller = await make_seller()
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    runs: list[str] = []
    app = replica(seller, redis_server.url, tmp_path / "spool.json", runs)
    async with served(app) as origin, httpx.AsyncClient() as http:
        redis_server.stop()
        answer = await http.post(
            origin + ROUTE, json={"n": 1}, headers={"payment-signature": token}
        )
    assert answer.status_code == 503 and answer.headers["retry-after"] == "5"
    assert "shared billing state is unreachable" in answer.json()["message"]
    assert "nothing was charged" in answer.json()["message"]
    assert runs == []
    ledger = await seller.ledger(seller.fixed_plan)
    assert ledger["burned"] == 0 and ledger["granted"] == ledger["balance"] == 10
