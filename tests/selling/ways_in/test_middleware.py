"""The payment middleware on a builder's own aiohttp app: SPEC.md's state table row by row,
over real loopback HTTP against the local sandbox (conservation checked on its ledger)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import httpx
import pytest
from aiohttp import web

from svc_gateway.encoding import decode_b64_json
from svc_gateway.selling import PAYMENTS, RouteConfig, build_payment_app
from tests.e2e.test_state_table import tamper
from tests.support.market import FaultProxy, refuse_500, settle_success_false
from tests.support.sellers import Seller, SellerFactory, make_seller_fixture  # noqa: F401

calls: list[str] = []


@pytest.fixture(autouse=True)
def _no_calls_yet() -> None:
    calls.clear()


async def run_wait(request: web.Request) -> web.Response:
    data = await request.json()
    calls.append("wait")
    return web.json_response({"thread": request.match_info.get("thread_id"), "echo": data})


async def summary(request: web.Request) -> web.Response:
    calls.append("summary")
    return web.json_response({"doc": request.match_info["doc"], "summary": "short"})


async def free(request: web.Request) -> web.Response:
    calls.append("free")
    return web.json_response({"free": True})


async def broken(request: web.Request) -> web.Response:
    calls.append("broken")
    raise RuntimeError("the builder's handler broke")


async def missing(request: web.Request) -> web.Response:
    calls.append("missing")
    raise web.HTTPNotFound(text="no such thread")


async def teapot(request: web.Request) -> web.Response:
    return web.json_response({"error": "busy"}, status=418)


async def streaming(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.enable_compression()
    await response.prepare(request)
    await response.write(b"an unpaid stream")
    return response


async def unprepared_stream(request: web.Request) -> web.StreamResponse:
    return web.StreamResponse()


def app_for(seller: Seller, routes: dict[str, Any], **settings: Any) -> web.Application:
    app = build_payment_app(routes, seller.settings(**settings))
    app.router.add_post("/threads/{thread_id}/runs/wait", run_wait)
    app.router.add_post("/runs/wait", run_wait)
    app.router.add_get("/docs/{doc}/summary", summary)
    app.router.add_get("/free", free)
    app.router.add_post("/broken", broken)
    app.router.add_post("/missing", missing)
    app.router.add_post("/teapot", teapot)
    app.router.add_post("/stream", streaming)
    app.router.add_post("/unprepared", unprepared_stream)
    return app


async def started(make_seller: SellerFactory, **settings: Any) -> tuple[Seller, web.Application]:
    seller: Seller = await make_seller()
    fixed = RouteConfig(plan_id=seller.fixed_plan, agent_id=seller.fixed_agent)
    routes: dict[str, Any] = {
        "POST /threads/{thread_id}/runs/wait": fixed,
        "POST /runs/wait": {"plan_id": seller.fixed_plan, "agent_id": seller.fixed_agent},
        "GET /docs/:doc/summary": RouteConfig(
            plan_id=seller.dynamic_plan,
            agent_id=seller.dynamic_agent,
            credits=3,
            description="A summary of one document",
            mime_type="application/json",
        ),
        "POST /broken": fixed,
        "POST /missing": fixed,
        "POST /teapot": fixed,
        "POST /stream": fixed,
        "POST /unprepared": fixed,
    }
    app = app_for(seller, routes, **settings)
    await seller.serve(app)
    return seller, app


def paid(token: str) -> dict[str, str]:
    return {"payment-signature": token}


async def test_no_token_is_402_with_the_routes_envelope(make_seller: SellerFactory) -> None:
    seller, _app = await started(make_seller)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        posted = await http.post("/threads/t-7/runs/wait?x=1", json={"q": 1})
        got = await http.get("/docs/d-1/summary")
    assert posted.status_code == 402 and got.status_code == 402
    assert calls == []  # the handlers never ran
    envelope = decode_b64_json(posted.headers["payment-required"])
    assert envelope is not None
    assert envelope["resource"]["url"] == seller.origin + "/threads/t-7/runs/wait"
    (accept,) = envelope["accepts"]
    assert accept["planId"] == seller.fixed_plan
    assert accept["scheme"] == "svc:erc4337" and accept["network"] == "eip155:84532"
    assert accept["extra"]["agentId"] == seller.fixed_agent
    assert accept["extra"]["httpVerb"] == "POST"
    summary_envelope = decode_b64_json(got.headers["payment-required"])
    assert summary_envelope is not None
    assert summary_envelope["accepts"][0]["planId"] == seller.dynamic_plan
    assert summary_envelope["accepts"][0]["extra"]["httpVerb"] == "GET"
    assert summary_envelope["resource"]["description"] == "A summary of one document"
    assert summary_envelope["resource"]["mimeType"] == "application/json"
    assert "svc_getAccessToken" in posted.json()["message"]


async def test_a_paid_route_runs_settles_and_attaches_the_receipt(
    make_seller: SellerFactory,
) -> None:
    seller, app = await started(make_seller)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        answer = await http.post("/threads/t-9/runs/wait", json={"q": 2}, headers=paid(token))
    assert answer.status_code == 200
    assert answer.json() == {"thread": "t-9", "echo": {"q": 2}}
    receipt = decode_b64_json(answer.headers["payment-response"])
    assert receipt is not None and receipt["success"] is True
    assert receipt["creditsRedeemed"] == "2" and receipt["remainingBalance"] == "8"
    ledger = await seller.ledger(seller.fixed_plan)
    assert ledger["burned"] == 2 and ledger["granted"] == ledger["balance"] + ledger["burned"]
    assert app[PAYMENTS].stats.settled == 1


async def test_a_tampered_token_is_402_and_the_handler_never_runs(
    make_seller: SellerFactory,
) -> None:
    seller, _app = await started(make_seller)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        answer = await http.post("/runs/wait", json={}, headers=paid(tamper(token)))
    assert answer.status_code == 402 and "signature" in answer.json()["reason"]
    assert decode_b64_json(answer.headers["payment-required"]) is not None
    assert calls == []
    assert (await seller.ledger(seller.fixed_plan))["burned"] == 0


async def test_too_few_credits_is_402(make_seller: SellerFactory) -> None:
    seller, _app = await started(make_seller)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent, top_up=False)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        answers = [
            await http.post("/runs/wait", json={"n": i}, headers=paid(token)) for i in range(6)
        ]
    assert [a.status_code for a in answers] == [200] * 5 + [402]  # 10 credits, 2 each
    assert "insufficient credits" in answers[-1].json()["reason"]
    ledger = await seller.ledger(seller.fixed_plan)
    assert ledger == {"granted": 10, "burned": 10, "balance": 0, "expired": 0}


async def test_handler_failures_are_not_charged(make_seller: SellerFactory) -> None:
    seller, app = await started(make_seller)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        raised = await http.post("/broken", json={}, headers=paid(token))
        not_found = await http.post("/missing", json={}, headers=paid(token))
        other = await http.post("/teapot", json={}, headers=paid(token))
    assert raised.status_code == 500
    assert raised.json()["message"] == "The agent failed to answer; nothing was charged."
    assert not_found.status_code == 404 and not_found.text == "no such thread"
    assert other.status_code == 418 and other.json() == {"error": "busy"}
    assert calls == ["broken", "missing"]
    for answer in (raised, not_found, other):
        assert "payment-response" not in answer.headers
    assert (await seller.ledger(seller.fixed_plan))["burned"] == 0
    assert app[PAYMENTS].stats.handler_failures == 3 and app[PAYMENTS].stats.settled == 0


async def test_a_streaming_handler_is_refused_before_anything_is_sent(
    make_seller: SellerFactory,
) -> None:
    seller, _app = await started(make_seller)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        streamed = await http.post("/stream", json={}, headers=paid(token))
        unprepared = await http.post("/unprepared", json={}, headers=paid(token))
    for answer in (streamed, unprepared):
        assert answer.status_code == 500
        assert "an unpaid stream" not in answer.text
        assert "payment-response" not in answer.headers
    assert (await seller.ledger(seller.fixed_plan))["burned"] == 0


async def test_a_streaming_refusal_tells_the_builder_why(
    make_seller: SellerFactory, all_logs: Any
) -> None:
    seller, _app = await started(make_seller)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        await http.post("/stream", json={}, headers=paid(token))
    assert "POST /stream is a paid route, and paid routes cannot stream" in all_logs.text


async def test_unmatched_routes_pass_through_without_a_service_call(
    make_seller: SellerFactory,
) -> None:
    seller, app = await started(make_seller)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        free_answer = await http.get("/free")
        wrong_verb = await http.get("/runs/wait")  # only POST is gated
        too_deep = await http.post("/threads/a/b/runs/wait", json={})
    assert free_answer.status_code == 200 and free_answer.json() == {"free": True}
    assert wrong_verb.status_code == 405  # the app's own answer, not a 402
    assert too_deep.status_code == 404
    assert "payment-required" not in free_answer.headers
    assert app[PAYMENTS].stats.requests == 0


async def test_credits_functions_sync_and_async_set_the_charge(
    make_seller: SellerFactory,
) -> None:
    seller: Seller = await make_seller()
    seen: list[str] = []

    def by_length(request: web.Request) -> int:
        seen.append(request.match_info.get("doc", "?") if request.match_info else request.path)
        return 4

    async def by_query(request: web.Request) -> int:
        await asyncio.sleep(0)
        return int(request.query.get("size", "1"))

    routes = {
        "POST /runs/wait": RouteConfig(
            plan_id=seller.dynamic_plan, agent_id=seller.dynamic_agent, credits=by_length
        ),
        "GET /docs/{doc}/summary": RouteConfig(
            plan_id=seller.dynamic_plan, agent_id=seller.dynamic_agent, credits=by_query
        ),
    }
    await seller.serve(app_for(seller, routes))
    token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        sync_priced = await http.post("/runs/wait", json={}, headers=paid(token))
        async_priced = await http.get("/docs/a/summary?size=3", headers=paid(token))
        clamped = await http.get("/docs/a/summary?size=99", headers=paid(token))
    receipts = [decode_b64_json(a.headers["payment-response"]) for a in (sync_priced, async_priced)]
    assert [r["creditsRedeemed"] for r in receipts if r] == ["4", "3"]
    clamped_receipt = decode_b64_json(clamped.headers["payment-response"])
    assert clamped_receipt is not None and clamped_receipt["creditsRedeemed"] == "5"  # plan max
    ledger = await seller.ledger(seller.dynamic_plan)
    assert ledger["burned"] == 12 and ledger["granted"] == ledger["balance"] + 12


async def test_a_failing_credits_function_is_500_and_uncharged(
    make_seller: SellerFactory,
) -> None:
    seller: Seller = await make_seller()

    def broken_price(request: web.Request) -> int:
        raise ValueError("no price")

    def wrong_type(request: web.Request) -> int:
        return "3"  # type: ignore[return-value]

    routes = {
        "POST /runs/wait": RouteConfig(plan_id=seller.fixed_plan, credits=broken_price),
        "POST /threads/{t}/runs/wait": RouteConfig(plan_id=seller.fixed_plan, credits=wrong_type),
    }
    await seller.serve(app_for(seller, routes))
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        answers = [
            await http.post("/runs/wait", json={}, headers=paid(token)),
            await http.post("/threads/x/runs/wait", json={}, headers=paid(token)),
        ]
    for answer in answers:
        assert answer.status_code == 500
        assert answer.json()["message"] == "The agent could not price this request."
    assert calls == [] and (await seller.ledger(seller.fixed_plan))["burned"] == 0


async def test_scheme_and_network_overrides_reach_the_envelope(
    make_seller: SellerFactory,
) -> None:
    seller: Seller = await make_seller()
    routes = {
        "POST /runs/wait": RouteConfig(
            plan_id=seller.fixed_plan, scheme="svc:card-delegation", network="stripe"
        )
    }
    await seller.serve(app_for(seller, routes))
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        answer = await http.post("/runs/wait", json={})
    envelope = decode_b64_json(answer.headers["payment-required"])
    assert envelope is not None
    (accept,) = envelope["accepts"]
    assert accept["scheme"] == "svc:card-delegation" and accept["network"] == "stripe"
    assert "agentId" not in accept["extra"] or accept["extra"]["agentId"] is None


async def test_a_public_url_setting_names_the_resource(make_seller: SellerFactory) -> None:
    seller: Seller = await make_seller()
    routes = {"POST /runs/wait": RouteConfig(plan_id=seller.fixed_plan)}
    app = app_for(seller, routes, paidEndpointPublicUrl="https://agent.example.com/base")
    await seller.serve(app)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        answer = await http.post("/runs/wait", json={})
    envelope = decode_b64_json(answer.headers["payment-required"])
    assert envelope is not None
    assert envelope["resource"]["url"] == "https://agent.example.com/runs/wait"


async def test_settle_outage_delivers_without_receipt_and_success_false_withholds(
    make_seller: SellerFactory, tmp_path: Any
) -> None:
    seller: Seller = await make_seller()
    proxy = FaultProxy(seller.sandbox.origin)
    await proxy.start()
    try:
        routes = {"POST /runs/wait": RouteConfig(plan_id=seller.fixed_plan)}
        settings = {"baseUrl": proxy.base_url, "settleQueuePath": str(tmp_path / "q.json")}
        app = app_for(seller, routes, **settings)
        app[PAYMENTS].flow.settler.backoff = (0.0, 0.0)
        await seller.serve(app)
        token = await seller.token(seller.fixed_plan, seller.fixed_agent)
        proxy.faults["x402/settle"] = [refuse_500, refuse_500, refuse_500, settle_success_false]
        async with httpx.AsyncClient(base_url=seller.origin) as http:
            deferred = await http.post("/runs/wait", json={"a": 1}, headers=paid(token))
            withheld = await http.post("/runs/wait", json={"a": 2}, headers=paid(token))
        assert deferred.status_code == 200 and deferred.json()["echo"] == {"a": 1}
        assert "payment-response" not in deferred.headers
        assert withheld.status_code == 402 and '"a":2' not in withheld.text.replace(" ", "")
        assert "ledger busy" in withheld.json()["reason"]
        stats = app[PAYMENTS].stats
        assert stats.settle_deferred == 1 and stats.settle_queue == 1
        assert stats.settle_refused == 1
        assert await app[PAYMENTS].flow.settler.drain_queue() == 1  # the outage is over
        ledger = await seller.ledger(seller.fixed_plan)
        assert ledger["burned"] == 2 and ledger["granted"] == ledger["balance"] + 2
    finally:
        await proxy.close()


async def test_a_settled_v3_token_retried_gets_the_same_answer_once_paid(
    make_seller: SellerFactory,
) -> None:
    seller, app = await started(make_seller)
    url = seller.origin + "/runs/wait"
    token = await seller.token(seller.fixed_plan, seller.fixed_agent, url=url)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        first = await http.post("/runs/wait", json={"q": "same"}, headers=paid(token))
        retry = await http.post("/runs/wait", json={"q": "same"}, headers=paid(token))
        other = await http.post("/runs/wait", json={"q": "other"}, headers=paid(token))
    assert first.status_code == 200 and retry.status_code == 200
    assert retry.content == first.content
    assert retry.headers["payment-response"] == first.headers["payment-response"]
    assert other.status_code == 402 and "other" not in other.text
    assert calls == ["wait", "wait"]  # the retry did not run the handler; the other body did
    assert app[PAYMENTS].stats.replayed == 1
    ledger = await seller.ledger(seller.fixed_plan)
    assert ledger["burned"] == 2 and ledger["granted"] == ledger["balance"] + 2


async def test_a_reusable_token_is_never_replayed(make_seller: SellerFactory) -> None:
    seller, app = await started(make_seller)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        for _ in range(2):
            answer = await http.post("/runs/wait", json={"q": "same"}, headers=paid(token))
            assert answer.status_code == 200
    assert calls == ["wait", "wait"] and app[PAYMENTS].stats.replayed == 0
    assert (await seller.ledger(seller.fixed_plan))["burned"] == 4


async def test_a_sold_request_is_freed_as_it_ends_not_by_the_garbage_collector(
    make_seller: SellerFactory,
) -> None:
    """The streaming guard is on the request only while its handler runs: left there, the
    request and its hook would form a reference cycle, every sold request's objects then
    waiting for the garbage collector (its collections came 1.4 times as often under load)."""
    seller: Seller = await make_seller()
    fixed = RouteConfig(plan_id=seller.fixed_plan, agent_id=seller.fixed_agent)
    seen: list[weakref.ref[web.Request]] = []

    async def remembered(request: web.Request) -> web.Response:
        seen.append(weakref.ref(request))
        return web.json_response({"ok": True})

    app = build_payment_app({"POST /kept": fixed}, seller.settings())
    app.router.add_post("/kept", remembered)
    await seller.serve(app)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    gc.collect()
    gc.disable()
    try:
        async with httpx.AsyncClient(base_url=seller.origin) as http:
            for _ in range(2):  # (the connection's server task holds its latest request)
                answer = await http.post("/kept", json={}, headers=paid(token))
                assert answer.status_code == 200 and "payment-response" in answer.headers
        assert len(seen) == 2 and seen[0]() is None
    finally:
        gc.enable()


def test_a_prepare_hook_set_on_the_request_before_the_sale_is_put_back_after_it() -> None:
    """The streaming guard is lent to the request while its handler runs: a hook another layer
    had set on the request is restored afterwards, not dropped."""
    from aiohttp.test_utils import make_mocked_request

    from svc_gateway.selling.ways_in.middleware import _guard_streaming, _unguard

    request = make_mocked_request("POST", "/agent")

    async def outer_hook(response: web.StreamResponse) -> None:
        return None

    object.__setattr__(request, "_prepare_hook", outer_hook)
    own = _guard_streaming(request)
    assert own is outer_hook
    assert vars(request)["_prepare_hook"] is not outer_hook  # the guard, while the handler runs
    _unguard(request, own)
    assert vars(request)["_prepare_hook"] is outer_hook
