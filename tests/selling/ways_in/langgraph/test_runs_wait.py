"""A real LangGraph server (in-process, offline) behind our ASGI ``PaymentMiddleware``, over
real loopback HTTP against the local sandbox: ``/runs/wait`` and ``/threads/{thread_id}/runs/wait``
gated, ``/assistants/search`` and ``/ok`` free; the ledger is the truth (granted = balance +
burned). The server runs ``langgraph dev``'s blocking-call detector (conftest.py), so every
paid request here also proves the gate never blocks the loop."""

from __future__ import annotations

from typing import Any

import httpx

from svc_gateway.encoding import decode_b64_json
from svc_gateway.selling.ways_in.langgraph import RouteConfig
from tests.e2e.test_state_table import tamper
from tests.support.market import FaultProxy, connect_error
from tests.support.sellers import Seller, SellerFactory

from .conftest import LangGraphServer, Sell


def routes_of(seller: Seller, threaded_credits: int = 3) -> dict[str, Any]:
    fixed = RouteConfig(plan_id=seller.fixed_plan, agent_id=seller.fixed_agent)
    return {
        "POST /runs/wait": fixed,
        "POST /threads/:thread_id/runs/wait": {
            "plan_id": seller.dynamic_plan,
            "agent_id": seller.dynamic_agent,
            "credits": threaded_credits,
        },
    }


def paid(token: str) -> dict[str, str]:
    return {"payment-signature": token}


ECHO = {"assistant_id": "echo", "input": {"message": "hi"}}
BOOM = {"assistant_id": "boom", "input": {"message": "hi"}}


async def conserved(seller: Seller, plan: str) -> dict[str, int]:
    ledger = await seller.ledger(plan)
    assert ledger["granted"] == ledger["balance"] + ledger["burned"]
    return ledger


async def test_unpaid_runs_get_the_402_envelope_and_free_routes_pass(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    seller: Seller = await make_seller()
    sell(seller, routes_of(seller))
    async with httpx.AsyncClient(base_url=langgraph_server.origin, timeout=30) as http:
        thread = (await http.post("/threads", json={})).json()["thread_id"]
        stateless = await http.post("/runs/wait", json=ECHO)
        threaded = await http.post(f"/threads/{thread}/runs/wait", json=ECHO)
        ok = await http.get("/ok")
        search = await http.post("/assistants/search", json={})
    assert stateless.status_code == 402 and threaded.status_code == 402
    assert stateless.headers["cache-control"] == "no-store"
    envelope = decode_b64_json(stateless.headers["payment-required"])
    assert envelope is not None and envelope["x402Version"] == 2
    assert envelope["resource"]["url"] == langgraph_server.origin + "/runs/wait"
    (accept,) = envelope["accepts"]
    # scheme and network come from the plan: no override needed for svc:* schemes
    assert accept["scheme"] == "svc:erc4337" and accept["network"] == "eip155:84532"
    assert accept["planId"] == seller.fixed_plan
    assert accept["extra"]["agentId"] == seller.fixed_agent
    threaded_envelope = decode_b64_json(threaded.headers["payment-required"])
    assert threaded_envelope is not None
    assert threaded_envelope["accepts"][0]["planId"] == seller.dynamic_plan
    assert ok.status_code == 200 and ok.json()["ok"] is True
    assert search.status_code == 200 and {a["graph_id"] for a in search.json()} >= {"echo"}
    assert "payment-required" not in search.headers
    assert (await conserved(seller, seller.fixed_plan))["burned"] == 0


async def test_a_paid_run_returns_the_state_and_the_receipt_and_burns_the_routes_credits(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    seller: Seller = await make_seller()
    sell(seller, routes_of(seller))
    fixed = await seller.token(seller.fixed_plan, seller.fixed_agent)
    dynamic = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
    async with httpx.AsyncClient(base_url=langgraph_server.origin, timeout=30) as http:
        stateless = await http.post("/runs/wait", json=ECHO, headers=paid(fixed))
        thread = (await http.post("/threads", json={})).json()["thread_id"]
        threaded = await http.post(f"/threads/{thread}/runs/wait", json=ECHO, headers=paid(dynamic))
        state = await http.get(f"/threads/{thread}/state")
    assert stateless.status_code == 200, stateless.text
    assert stateless.json() == {"message": "hi", "echo": "echo: hi"}
    receipt = decode_b64_json(stateless.headers["payment-response"])
    assert receipt is not None and receipt["success"] is True
    assert receipt["creditsRedeemed"] == "2"  # the fixed plan charges 2 per request
    assert stateless.headers["cache-control"] == "private"
    assert threaded.status_code == 200 and threaded.json()["echo"] == "echo: hi"
    threaded_receipt = decode_b64_json(threaded.headers["payment-response"])
    assert threaded_receipt is not None and threaded_receipt["creditsRedeemed"] == "3"
    assert state.json()["values"]["echo"] == "echo: hi"  # the run really ran on the thread
    assert (await conserved(seller, seller.fixed_plan))["burned"] == 2
    assert (await conserved(seller, seller.dynamic_plan))["burned"] == 3


async def test_a_run_that_fails_is_never_charged(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    """LangGraph answers a graph that raises with **200** and ``{"__error__": ...}`` (its status
    leaves before the run): the gate reads the body, answers 500 and settles nothing."""
    seller: Seller = await make_seller()
    sell(seller, routes_of(seller))
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(base_url=langgraph_server.origin, timeout=30) as http:
        failed = await http.post("/runs/wait", json=BOOM, headers=paid(token))
        unknown = await http.post(
            "/runs/wait", json={"assistant_id": "nope", "input": {}}, headers=paid(token)
        )
    assert failed.status_code == 500
    assert failed.json()["__error__"]["message"] == "graph failed on purpose"
    assert "payment-response" not in failed.headers
    assert unknown.status_code == 422 and "payment-response" not in unknown.headers
    assert (await conserved(seller, seller.fixed_plan))["burned"] == 0


async def test_bad_spent_and_short_tokens_get_402_and_nothing_is_lost(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    seller: Seller = await make_seller()
    sell(seller, routes_of(seller, threaded_credits=5))
    url = langgraph_server.origin + "/runs/wait"
    good = await seller.token(seller.fixed_plan, seller.fixed_agent)
    v3 = await seller.token(seller.fixed_plan, seller.fixed_agent, url=url)
    short = await seller.token(seller.dynamic_plan, seller.dynamic_agent, top_up=False)
    async with httpx.AsyncClient(base_url=langgraph_server.origin, timeout=30) as http:
        bad = await http.post("/runs/wait", json=ECHO, headers=paid(tamper(good)))
        first = await http.post("/runs/wait", json=ECHO, headers=paid(v3))
        other = {"assistant_id": "echo", "input": {"message": "again"}}
        spent = await http.post("/runs/wait", json=other, headers=paid(v3))
        thread = (await http.post("/threads", json={})).json()["thread_id"]
        path = f"/threads/{thread}/runs/wait"
        shorts = [await http.post(path, json=ECHO, headers=paid(short)) for _ in range(5)]
    assert bad.status_code == 402 and "signature" in bad.json()["reason"]
    assert first.status_code == 200 and "payment-response" in first.headers
    assert spent.status_code == 402 and "again" not in spent.text
    # the dynamic plan grants 20 credits, 5 a run: four runs, then too few credits
    assert [a.status_code for a in shorts] == [200] * 4 + [402]
    assert "insufficient credits" in shorts[-1].json()["reason"]
    assert (await conserved(seller, seller.fixed_plan))["burned"] == 2
    assert (await conserved(seller, seller.dynamic_plan))["burned"] == 20


async def test_a_service_outage_is_503_and_nothing_runs_or_is_charged(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    seller: Seller = await make_seller()
    proxy = FaultProxy(seller.sandbox.origin)
    await proxy.start()
    try:
        sell(seller, routes_of(seller), base_url=proxy.base_url, paidBudgetSecs=2)
        token = await seller.token(seller.fixed_plan, seller.fixed_agent)
        proxy.always["x402/verify"] = connect_error
        async with httpx.AsyncClient(base_url=langgraph_server.origin, timeout=30) as http:
            down = await http.post("/runs/wait", json=ECHO, headers=paid(token))
            del proxy.always["x402/verify"]
            back = await http.post("/runs/wait", json=ECHO, headers=paid(token))
        assert down.status_code == 503 and "nothing was charged" in down.text
        assert back.status_code == 200 and "payment-response" in back.headers
        assert (await conserved(seller, seller.fixed_plan))["burned"] == 2
    finally:
        await proxy.close()


async def test_build_payment_app_and_the_middleware_alone() -> None:
    """``build_payment_app(payments, routes)`` is a FastAPI app where FastAPI is installed, else
    Starlette, with the middleware installed (the seed's order of arguments)."""
    from starlette.applications import Starlette

    from svc_gateway.selling.ways_in.langgraph import PaymentMiddleware, build_payment_app
    from svc_gateway.service.seller import Payments

    payments = Payments.connect(None, environment="local", base_url="http://127.0.0.1:9/api/v1")
    app = build_payment_app(payments, {"POST /runs/wait": {"plan_id": "p-1"}})
    assert isinstance(app, Starlette)
    (middleware,) = app.user_middleware
    assert middleware.cls is PaymentMiddleware
    assert middleware.kwargs["payments"] is payments
    await payments.aclose()


async def test_a_public_url_names_the_resource_behind_a_proxy(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    seller: Seller = await make_seller()
    sell(seller, routes_of(seller), paidEndpointPublicUrl="https://agent.example.com/base")
    async with httpx.AsyncClient(base_url=langgraph_server.origin, timeout=30) as http:
        refused = await http.post("/runs/wait?debug=1", json=ECHO)
    envelope = decode_b64_json(refused.headers["payment-required"])
    assert envelope is not None
    assert envelope["resource"]["url"] == "https://agent.example.com/runs/wait"


async def test_a_retried_run_with_its_idempotency_key_gets_the_kept_answer_and_pays_once(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    """The ASGI way in hands the buyer's Idempotency-Key to the one flow (issue 46): the same
    key and request again is the kept state and receipt, no second run nor burn; the same key
    with another input is 422 and burns nothing."""
    seller: Seller = await make_seller()
    sell(seller, routes_of(seller))
    token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
    keyed = {**paid(token), "Idempotency-Key": "run-0001-retry-safe"}
    async with httpx.AsyncClient(base_url=langgraph_server.origin, timeout=30) as http:
        thread = (await http.post("/threads", json={})).json()["thread_id"]
        url = f"/threads/{thread}/runs/wait"
        first = await http.post(url, json=ECHO, headers=keyed)
        again = await http.post(url, json=ECHO, headers=keyed)
        other = await http.post(url, json={**ECHO, "input": {"message": "bye"}}, headers=keyed)
        runs = (await http.get(f"/threads/{thread}/runs")).json()
    assert first.status_code == 200 and again.status_code == 200, again.text
    assert again.json() == first.json() == {"message": "hi", "echo": "echo: hi"}
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert again.headers["payment-response"] == first.headers["payment-response"]
    assert other.status_code == 422 and "idempotency_key_reused" in other.text
    assert len(runs) == 1  # the graph ran once
    assert (await conserved(seller, seller.dynamic_plan))["burned"] == 3
