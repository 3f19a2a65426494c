"""A paid answer is never stored by a shared cache or CDN (issue 41): a handler's
``CDN-Cache-Control``, ``Surrogate-Control``, ``Expires`` and their kin are dropped and its
``Cache-Control`` made private, on the paid endpoint and on a ``RouteConfig`` route, for a paid
200 and for an error answer alike; a 402 is ``no-store``. Over loopback HTTP, a real buyer
paying against the sandbox."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from aiohttp import web

from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.selling import RouteConfig, build_payment_app
from tests.support.market import MarketFactory
from tests.support.sellers import Seller, SellerFactory, make_seller_fixture  # noqa: F401

pytestmark = pytest.mark.asyncio

#: what a handler (or a framework in front of it) may set to have a CDN store its answer
CDN_HEADERS = {
    "Cache-Control": "public, max-age=600, s-maxage=600",
    "CDN-Cache-Control": "public, max-age=600",
    "Cloudflare-CDN-Cache-Control": "max-age=600",
    "Surrogate-Control": "max-age=600",
    "Surrogate-Key": "answers",
    "Edge-Control": "cache-maxage=600",
    "X-Accel-Expires": "600",
    "Expires": "Thu, 01 Jan 2099 00:00:00 GMT",
    "X-Answered-By": "the seller",  # an ordinary header: kept
}
DROPPED = [name for name in CDN_HEADERS if name not in ("Cache-Control", "X-Answered-By")]


def never_shared(response: httpx.Response) -> None:
    """No header lets a shared cache store ``response``."""
    present = [name for name in DROPPED if name in response.headers]
    assert present == [], f"{response.status_code} carries {present}"
    directives = [d.strip().lower() for d in response.headers["cache-control"].split(",")]
    assert "private" in directives or "no-store" in directives, directives
    assert "public" not in directives and not any(d.startswith("s-maxage") for d in directives)


async def cdn_agent(request: dict[str, Any]) -> web.Response:
    """The seller's agent: its answer (or its 404) marked for a CDN to keep for ten minutes."""
    status = 404 if request["prompt"] == "missing" else 200
    return web.json_response({"answer": "paid words"}, status=status, headers=CDN_HEADERS)


async def test_the_paid_endpoint_drops_every_cdn_header_from_paid_and_error_answers(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    def configure(gateway: ReferenceGateway) -> None:
        gateway.agent_handler = cdn_agent  # type: ignore[attr-defined]

    market = await make_market(configure_builder=configure, scripted=False)
    unpaid = await http.post(market.endpoint.url, json={"prompt": "hi"})
    assert unpaid.status_code == 402 and unpaid.headers["cache-control"] == "no-store"
    never_shared(unpaid)
    await market.order()
    paid = await http.post(
        market.endpoint.url,
        json={"prompt": "hi"},
        headers={"payment-signature": await market.token()},
    )
    assert paid.status_code == 200 and paid.json() == {"answer": "paid words"}
    never_shared(paid)
    assert paid.headers["cache-control"] == "max-age=600, private"
    assert paid.headers["x-answered-by"] == "the seller"
    missing = await http.post(
        market.endpoint.url,
        json={"prompt": "missing"},
        headers={"payment-signature": await market.token()},
    )
    assert missing.status_code == 404  # the agent's own error answer, uncharged
    never_shared(missing)


async def cdn_doc(request: web.Request) -> web.Response:
    status = 404 if request.match_info["doc"] == "missing" else 200
    return web.json_response({"doc": request.match_info["doc"]}, status=status, headers=CDN_HEADERS)


async def test_a_route_config_route_drops_every_cdn_header_from_paid_and_error_answers(
    make_seller: SellerFactory,
) -> None:
    seller: Seller = await make_seller()
    routes = {
        "GET /docs/{doc}": RouteConfig(
            plan_id=seller.dynamic_plan, agent_id=seller.dynamic_agent, credits=3
        )
    }
    app = build_payment_app(routes, seller.settings())
    app.router.add_get("/docs/{doc}", cdn_doc)
    await seller.serve(app)
    async with httpx.AsyncClient(base_url=seller.origin, timeout=30) as http:
        unpaid = await http.get("/docs/d-1")
        token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
        paid = await http.get("/docs/d-1", headers={"payment-signature": token})
        token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
        missing = await http.get("/docs/missing", headers={"payment-signature": token})
    assert unpaid.status_code == 402 and unpaid.headers["cache-control"] == "no-store"
    never_shared(unpaid)
    assert paid.status_code == 200 and paid.json() == {"doc": "d-1"}
    never_shared(paid)
    assert paid.headers["cache-control"] == "max-age=600, private"
    assert paid.headers["x-answered-by"] == "the seller"
    assert missing.status_code == 404
    never_shared(missing)
