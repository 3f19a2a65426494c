"""The paid endpoint's and the middleware's answers speak x402 v2 (issue 31), read by the x402
reference SDK: every 402 states the price terms and is never stored, a paid answer is private
and its receipt parses, a settle refusal carries x402's failed ``payment-response``, and a HEAD
on a paid GET is sold as that GET (over loopback HTTP, against the sandbox)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from aiohttp import web

from svc_gateway.config import load_config
from svc_gateway.encoding import decode_b64_json
from svc_gateway.hosts.embedded import DEMO_TOKEN
from svc_gateway.selling import RouteConfig, build_payment_app
from svc_gateway.selling.flow.plans import payment_deadline_secs
from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.service.pricing import erc20_price, fixed_credits
from tests.support.market import Market
from tests.support.sellers import Seller, SellerFactory, make_seller_fixture  # noqa: F401

x402_http = pytest.importorskip("x402.http", reason="the test extra installs the x402 SDK")

calls: list[str] = []


@pytest.fixture(autouse=True)
def _no_calls_yet() -> None:
    calls.clear()


async def doc(request: web.Request) -> web.Response:
    calls.append(request.method)
    body = {"doc": request.match_info["doc"], "text": "the whole document"}
    return web.json_response(body, headers={"Cache-Control": "public, max-age=60"})


async def ask(request: web.Request) -> web.Response:
    calls.append("ask")
    return web.json_response({"echo": await request.json()})


async def selling(make_seller: SellerFactory) -> Seller:
    seller: Seller = await make_seller()
    routes: dict[str, Any] = {
        "GET /docs/{doc}": RouteConfig(
            plan_id=seller.dynamic_plan, agent_id=seller.dynamic_agent, credits=3
        ),
        "POST /ask": RouteConfig(plan_id=seller.fixed_plan, agent_id=seller.fixed_agent),
    }
    app = build_payment_app(routes, seller.settings())
    app.router.add_get("/docs/{doc}", doc)
    app.router.add_post("/ask", ask)
    await seller.serve(app)
    return seller


def check_terms(accept: Any, *, amount: int, pay_to: str, plan_id: str, deadline: int) -> None:
    """x402's four price terms as this project fills them (docs/x402.md)."""
    assert accept.amount == str(amount)
    assert accept.pay_to.lower() == pay_to.lower()
    chain, credits, token_id = accept.asset.split("/")
    assert chain == accept.network == "eip155:84532"
    assert credits.startswith("erc1155:0x") and token_id == plan_id
    assert accept.max_timeout_seconds == deadline


async def test_the_paid_endpoints_402_reads_as_x402_and_is_never_stored(
    market: Market, http: httpx.AsyncClient
) -> None:
    response = await http.post(market.endpoint.url, json={"prompt": "hi"})
    assert response.status_code == 402
    assert response.headers["cache-control"] == "no-store"
    required = x402_http.decode_payment_required_header(response.headers["payment-required"])
    assert required.resource is not None and required.resource.url == market.endpoint.url
    assert required.error == "No payment-signature header was sent"
    (accept,) = required.accepts
    assert accept.scheme == "svc:erc4337"
    deadline = payment_deadline_secs(market.endpoint.flow.seller.config)
    check_terms(
        accept, amount=2, pay_to=market.builder_address, plan_id=market.plan_id, deadline=deadline
    )
    assert accept.extra == {"version": "1", "agentId": market.agent_id, "httpVerb": "POST"}


async def test_a_paid_endpoint_answer_is_private_with_an_x402_receipt(
    market: Market, http: httpx.AsyncClient
) -> None:
    await market.order()
    token = await market.token()
    response = await http.post(
        market.endpoint.url, json={"prompt": "two words"}, headers={"payment-signature": token}
    )
    assert response.status_code == 200
    assert response.headers["cache-control"] == "private"
    receipt = x402_http.decode_payment_response_header(response.headers["payment-response"])
    assert receipt.success is True and receipt.transaction
    assert receipt.network == "eip155:84532"
    assert (receipt.payer or "").lower() == market.subscriber_address.lower()


async def test_a_routes_402_states_its_price_and_a_paid_answer_is_never_public(
    make_seller: SellerFactory,
) -> None:
    seller = await selling(make_seller)
    token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
    async with httpx.AsyncClient(base_url=seller.origin, timeout=30) as http:
        unpaid = await http.get("/docs/d-1")
        paid = await http.get("/docs/d-1", headers={"payment-signature": token})
    assert unpaid.status_code == 402 and unpaid.headers["cache-control"] == "no-store"
    required = x402_http.decode_payment_required_header(unpaid.headers["payment-required"])
    deadline = payment_deadline_secs(load_config(seller.settings()))
    address = seller.builder.address or ""
    check_terms(
        required.accepts[0],
        amount=3,
        pay_to=address,
        plan_id=seller.dynamic_plan,
        deadline=deadline,
    )
    assert paid.status_code == 200 and paid.json()["doc"] == "d-1"
    # the handler's own max-age stays; "public" gives way to "private"
    assert paid.headers["cache-control"] == "max-age=60, private"
    assert x402_http.decode_payment_response_header(paid.headers["payment-response"]).success


async def test_head_on_a_paid_get_is_sold_as_that_get(make_seller: SellerFactory) -> None:
    seller = await selling(make_seller)
    token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
    async with httpx.AsyncClient(base_url=seller.origin, timeout=30) as http:
        got = await http.get("/docs/d-2")
        head = await http.head("/docs/d-2")
        assert calls == []  # the handler never ran unpaid
        paid_head = await http.head("/docs/d-2", headers={"payment-signature": token})
    assert head.status_code == 402 and head.headers["cache-control"] == "no-store"
    # the same envelope as the GET's: a token bought for the GET pays for its HEAD
    assert decode_b64_json(head.headers["payment-required"]) == decode_b64_json(
        got.headers["payment-required"]
    )
    required = x402_http.decode_payment_required_header(head.headers["payment-required"])
    assert required.accepts[0].extra["httpVerb"] == "GET"
    assert paid_head.status_code == 200 and paid_head.content == b""
    assert x402_http.decode_payment_response_header(paid_head.headers["payment-response"]).success
    assert calls == ["HEAD"]
    assert (await seller.ledger(seller.dynamic_plan))["burned"] == 3


async def test_a_settle_refusal_is_402_with_a_failed_x402_payment_response(
    make_seller: SellerFactory,
) -> None:
    seller = await selling(make_seller)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent, url=seller.origin + "/ask")
    async with httpx.AsyncClient(base_url=seller.origin, timeout=30) as http:
        first = await http.post("/ask", json={"n": 1}, headers={"payment-signature": token})
        # the single-use token is spent: the service refuses this settle, the answer is withheld
        spent = await http.post("/ask", json={"n": 2}, headers={"payment-signature": token})
    assert first.status_code == 200
    assert spent.status_code == 402 and '"n":2' not in spent.text.replace(" ", "")
    assert spent.headers["cache-control"] == "no-store"
    assert calls == ["ask", "ask"]
    required = x402_http.decode_payment_required_header(spent.headers["payment-required"])
    assert required.accepts[0].amount == "2" and required.error
    failed = x402_http.decode_payment_response_header(spent.headers["payment-response"])
    assert failed.success is False
    assert failed.error_reason and failed.error_reason == required.error
    assert failed.transaction == ""
    assert failed.network == "eip155:84532"


async def test_the_402_deadline_counts_settle_and_pays_the_plans_receiver_not_its_owner(
    make_seller: SellerFactory,
) -> None:
    """``maxTimeoutSeconds`` is verify's budget + the handler's deadline + settle's budget
    (7 + 11 + 7 s here, written out, not recomputed by the code under test); ``payTo`` is the
    plan's first price receiver, which here is not the plan's owner."""
    seller = await make_seller()
    receiver = "0x" + "5e" * 20
    assert receiver != (seller.builder.address or "").lower()
    ids = await seller.builder.register_agent_and_plan(
        AgentMetadata(name="Paid elsewhere"),
        AgentApi(endpoints=None),
        PlanMetadata(name="Receiver plan"),
        erc20_price([1_000_000], [receiver], DEMO_TOKEN),
        fixed_credits(10, 2),
    )
    plan = await seller.builder.get_plan(ids.plan_id)
    assert (plan.registry.owner or plan.owner or "").lower() == seller.builder.address.lower()
    routes = {"POST /ask": RouteConfig(plan_id=ids.plan_id, agent_id=ids.agent_id)}
    app = build_payment_app(routes, seller.settings(paidBudgetSecs=7, handlerTimeoutSecs=11))
    app.router.add_post("/ask", ask)
    await seller.serve(app)
    async with httpx.AsyncClient(base_url=seller.origin, timeout=30) as http:
        unpaid = await http.post("/ask", json={"q": 1})
    assert unpaid.status_code == 402 and calls == []
    required = x402_http.decode_payment_required_header(unpaid.headers["payment-required"])
    (accept,) = required.accepts
    assert accept.max_timeout_seconds == 7 + 11 + 7
    assert accept.pay_to.lower() == receiver
