"""A route priced outside its plan's per-request range is named at start (a fixed price) or at
its first paid request (a price function), with the plan's range and what is charged instead."""

from __future__ import annotations

from typing import Any

import httpx
from aiohttp import web

from svc_gateway.selling import RouteConfig, build_payment_app
from tests.support import until
from tests.support.sellers import Seller, SellerFactory, make_seller_fixture  # noqa: F401


async def ok(_request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _serve_one(seller: Seller, path: str, config: RouteConfig) -> None:
    """``POST path`` sold with ``config`` by a payment app the seller serves."""
    app = build_payment_app({f"POST {path}": config}, seller.settings())
    app.router.add_post(path, ok)
    await seller.serve(app)


async def _two_requests_warned(seller: Seller, all_logs: Any, path: str) -> tuple[int, list[str]]:
    """Two unpaid ``POST path`` requests: the first one's status and the log lines naming the
    route."""
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        first = await http.post(path, json={})
        await http.post(path, json={})
    return first.status_code, [x for x in all_logs.lines if f"'POST {path}'" in x]


async def test_a_fixed_price_outside_the_plans_range_warns_at_start(
    make_seller: SellerFactory, all_logs: Any
) -> None:
    seller = await make_seller()  # fixed plan: 2 credits per request; dynamic: 1..5
    routes = {
        "POST /too-much": RouteConfig(plan_id=seller.fixed_plan, credits=3),
        "POST /fits": RouteConfig(plan_id=seller.dynamic_plan, credits=4),
    }
    app = build_payment_app(routes, seller.settings())
    app.router.add_post("/too-much", ok)
    app.router.add_post("/fits", ok)
    await seller.serve(app)  # no request is sent
    await until(lambda: "'POST /too-much'" in all_logs.text)
    line = next(x for x in all_logs.lines if "'POST /too-much'" in x)
    assert line.startswith("WARNING")
    assert "asks 3 credits per request" in line
    assert f"plan {seller.fixed_plan} allows 2–2 per request" in line
    assert "each request will be charged 2 credits" in line
    assert "POST /fits" not in all_logs.text


async def test_a_price_function_outside_the_range_warns_at_its_first_paid_request_once(
    make_seller: SellerFactory, all_logs: Any
) -> None:
    seller = await make_seller()
    priced = RouteConfig(plan_id=seller.dynamic_plan, credits=lambda _r: 9)
    await _serve_one(seller, "/priced", priced)
    status, warned = await _two_requests_warned(seller, all_logs, "/priced")
    assert status == 402
    assert len(warned) == 1
    assert "asks 9 credits per request" in warned[0]
    assert "allows 1–5 per request" in warned[0]
    assert "charged 5 credits" in warned[0]


async def test_a_fixed_price_its_start_could_not_check_warns_at_its_first_paid_request(
    make_seller: SellerFactory, all_logs: Any, monkeypatch: Any
) -> None:
    """The plan could not be read at start (an outage): the route's first paid request, whose
    admission reads it, checks the fixed price instead, once."""
    from svc_gateway.selling.ways_in.middleware import PaymentMiddleware

    async def outage(self: PaymentMiddleware) -> None:
        return None  # every plan read at start failed

    monkeypatch.setattr(PaymentMiddleware, "_check_prices", outage)
    seller = await make_seller()
    await _serve_one(seller, "/too-much", RouteConfig(plan_id=seller.fixed_plan, credits=3))
    assert "'POST /too-much'" not in all_logs.text
    status, warned = await _two_requests_warned(seller, all_logs, "/too-much")
    assert status == 402
    assert len(warned) == 1
    assert "asks 3 credits per request" in warned[0]
