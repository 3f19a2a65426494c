"""The payment middleware gates what aiohttp's router dispatches, not a spelling of the path:
an encoded slash, a multi-segment route variable and a HEAD on a paid GET are all sold, over
real loopback HTTP against the local sandbox (conservation checked on its ledger)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from svc_gateway.encoding import decode_b64_json
from svc_gateway.selling import PAYMENTS, RouteConfig, build_payment_app
from svc_gateway.selling.flow.plans import PlanFacts
from svc_gateway.selling.ways_in.routes import out_of_range, parse_route
from tests.support.sellers import Seller, SellerFactory, make_seller_fixture  # noqa: F401

ran: list[str] = []


async def summary(request: web.Request) -> web.Response:
    ran.append(request.match_info["doc_id"])
    return web.json_response(
        {"doc": request.match_info["doc_id"], "summary": "short"},
        headers={"X-Summary": "the paid answer"},
    )


async def files(request: web.Request) -> web.Response:
    ran.append(request.match_info["tail"])
    return web.json_response({"file": request.match_info["tail"]})


async def free(request: web.Request) -> web.Response:
    ran.append("free")
    return web.json_response({"free": True})


async def seller_app(make_seller: SellerFactory) -> tuple[Seller, web.Application]:
    ran.clear()
    seller: Seller = await make_seller()
    config = RouteConfig(plan_id=seller.dynamic_plan, agent_id=seller.dynamic_agent, credits=3)
    routes: dict[str, Any] = {
        "POST /docs/{doc_id}/summary": config,
        "GET /reports/{doc_id}/summary": config,
        "GET /files/{folder}/{name}": config,
    }
    app = build_payment_app(routes, seller.settings())
    app.router.add_post("/docs/{doc_id}/summary", summary)
    app.router.add_get("/reports/{doc_id}/summary", summary)  # aiohttp adds HEAD to it
    app.router.add_get("/files/{tail:.*}", files)  # one variable spanning segments
    app.router.add_get("/free/{doc_id}", free)
    await seller.serve(app)
    return seller, app


async def conserved(seller: Seller, burned: int) -> None:
    ledger = await seller.ledger(seller.dynamic_plan)
    assert ledger["burned"] == burned
    assert ledger["granted"] == ledger["balance"] + ledger["burned"]  # conservation


async def test_an_encoded_slash_is_the_route_the_router_dispatches_and_is_gated(
    make_seller: SellerFactory,
) -> None:
    seller, app = await seller_app(make_seller)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        unpaid = await http.post("/docs/q3%2Freport/summary", json={})
        assert unpaid.status_code == 402 and ran == []  # the handler never ran
        envelope = decode_b64_json(unpaid.headers["payment-required"])
        assert envelope is not None
        assert envelope["resource"]["url"] == seller.origin + "/docs/q3%2Freport/summary"
        token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
        bought = await http.post(
            "/docs/q3%2Freport/summary", json={}, headers={"payment-signature": token}
        )
    assert bought.status_code == 200 and bought.json()["doc"] == "q3/report"
    receipt = decode_b64_json(bought.headers["payment-response"])
    assert receipt is not None and receipt["creditsRedeemed"] == "3"
    assert ran == ["q3/report"] and app[PAYMENTS].stats.settled == 1
    await conserved(seller, 3)


async def test_a_variable_spanning_segments_is_gated_by_the_route_written_per_segment(
    make_seller: SellerFactory,
) -> None:
    seller, _app = await seller_app(make_seller)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        unpaid = await http.get("/files/q3/report.pdf")
        free_answer = await http.get("/free/q3%2Freport")
    assert unpaid.status_code == 402
    assert free_answer.status_code == 200  # a route nobody gated passes through
    assert ran == ["free"]
    await conserved(seller, 0)


async def test_head_on_a_paid_get_is_gated_like_the_get(make_seller: SellerFactory) -> None:
    seller, app = await seller_app(make_seller)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        unpaid = await http.head("/reports/r-1/summary")
        assert unpaid.status_code == 402 and ran == []  # the handler never ran
        assert "x-summary" not in unpaid.headers  # nothing of the answer leaked
        envelope = decode_b64_json(unpaid.headers["payment-required"])
        assert envelope is not None and envelope["accepts"][0]["extra"]["httpVerb"] == "GET"
        token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
        bought = await http.head("/reports/r-1/summary", headers={"payment-signature": token})
    assert bought.status_code == 200 and bought.headers["x-summary"] == "the paid answer"
    receipt = decode_b64_json(bought.headers["payment-response"])
    assert receipt is not None and receipt["creditsRedeemed"] == "3"
    assert ran == ["r-1"] and app[PAYMENTS].stats.settled == 1
    await conserved(seller, 3)


async def test_a_variable_inside_a_segment_and_a_static_file_are_gated_as_dispatched(
    make_seller: SellerFactory, tmp_path: Path
) -> None:
    """``/exports/report.{ext}`` (a variable inside one segment) and a file under a static
    route are gated on the path the router resolved: unpaid, neither handler nor file is
    served. Paid, the export is served and charged; the file (aiohttp streams it) is refused
    uncharged, as every streaming answer of a paid route is."""
    ran.clear()
    seller: Seller = await make_seller()
    (tmp_path / "secret.txt").write_text("the paid file")
    config = RouteConfig(plan_id=seller.dynamic_plan, agent_id=seller.dynamic_agent, credits=3)
    app = build_payment_app(
        {"GET /exports/report.csv": config, "GET /static/secret.txt": config}, seller.settings()
    )

    async def export(request: web.Request) -> web.Response:
        ran.append(request.match_info["ext"])
        return web.json_response({"ext": request.match_info["ext"]})

    app.router.add_get("/exports/report.{ext}", export)
    app.router.add_static("/static", tmp_path)
    await seller.serve(app)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        assert (await http.get("/exports/report.csv")).status_code == 402
        unpaid_file = await http.get("/static/secret.txt")
        assert unpaid_file.status_code == 402 and "the paid file" not in unpaid_file.text
        assert ran == []
        free = await http.get("/exports/report.json")  # another value: not a sold route
        assert free.status_code == 200 and ran == ["json"]
        token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
        paid = await http.get("/exports/report.csv", headers={"payment-signature": token})
        token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
        paid_file = await http.get("/static/secret.txt", headers={"payment-signature": token})
    assert paid.status_code == 200 and paid.json() == {"ext": "csv"}
    assert paid_file.status_code == 500 and "the paid file" not in paid_file.text
    await conserved(seller, 3)


def test_a_route_priced_against_an_unreadable_plan_is_not_warned_about() -> None:
    """Without the plan's range (its read failed) there is nothing to compare the price with:
    no warning, rather than a wrong one."""
    route = parse_route("GET /x", RouteConfig(plan_id="p", credits=5))
    unknown = PlanFacts(plan_id="p", scheme="svc:erc4337", network="eip155:84532")
    assert out_of_range(route, 5, unknown) is None
    ranged = PlanFacts(
        plan_id="p", scheme="svc:erc4337", network="eip155:84532", min_amount=1, max_amount=2
    )
    warning = out_of_range(route, 5, ranged)
    assert warning is not None and "1–2" in warning and "charged 2 credits" in warning
