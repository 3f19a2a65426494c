"""Route maps, RouteConfig validation, the replay cache's bounds, and the flow seam's edges
(a client that left, a busy flow), each a behaviour that fails when it breaks."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from aiohttp import web

from svc_gateway.config import ConfigError
from svc_gateway.selling import (
    PAYMENTS,
    Outcome,
    PaidRequest,
    RouteConfig,
    build_payment_app,
    payment_middleware,
)
from svc_gateway.selling.flow.plans import PlanFacts, build_envelope
from svc_gateway.selling.flow.replay import ReplayCache, is_single_use
from svc_gateway.selling.handlers import Answer
from svc_gateway.selling.state.settle_journal import SettleJournal
from svc_gateway.selling.state.settle_queue import PendingSettle
from svc_gateway.selling.ways_in.routes import RouteMap, parse_route
from tests.support.fixtures import StubMarketFactory
from tests.support.stub_service import BUILDER_KEY, PLAN_ID, StubService, make_token

now = time.time

PAYER = "0x" + "ee" * 20


def test_parameters_match_one_segment_by_position_in_both_spellings() -> None:
    routes = RouteMap(
        {
            "POST /threads/{thread_id}/runs/wait": RouteConfig(plan_id="p1"),
            "get /docs/:doc": {"planId": "p2", "credits": 3},
        }
    )
    hit = routes.match("POST", "/threads/abc/runs/wait")
    assert hit is not None and hit.config.plan_id == "p1"
    assert routes.match("POST", "/threads/abc/runs/wait/") is hit  # a trailing slash
    doc = routes.match("GET", "/docs/42")
    assert doc is not None and doc.config.credits == 3 and doc.key == "get /docs/:doc"
    assert routes.match("GET", "/docs/42/more") is None
    assert routes.match("POST", "/docs/42") is None
    assert routes.match("POST", "/threads/runs/wait") is None
    assert len(routes) == 2


def test_a_literal_segment_beats_a_parameter_and_star_matches_any_method() -> None:
    routes = RouteMap(
        {
            "POST /runs/{run_id}": RouteConfig(plan_id="param"),
            "POST /runs/wait": RouteConfig(plan_id="literal"),
            "* /any": RouteConfig(plan_id="any"),
        }
    )
    assert routes.match("POST", "/runs/wait").config.plan_id == "literal"  # type: ignore[union-attr]
    assert routes.match("POST", "/runs/77").config.plan_id == "param"  # type: ignore[union-attr]
    for method in ("GET", "DELETE", "PATCH"):
        assert routes.match(method, "/any").config.plan_id == "any"  # type: ignore[union-attr]


def test_the_match_cache_stays_bounded() -> None:
    routes = RouteMap({"GET /item/{id}": RouteConfig(plan_id="p")})
    for i in range(5000):
        assert routes.match("GET", f"/item/{i}") is not None
    assert len(routes._hits) <= 4096


@pytest.mark.parametrize(
    ("key", "config", "message"),
    [
        ("/no-method", {"plan_id": "p"}, "must be 'METHOD /path'"),
        ("FETCH /x", {"plan_id": "p"}, "must be 'METHOD /path'"),
        ("POST x", {"plan_id": "p"}, "must be 'METHOD /path'"),
        ("POST /x", {"credits": 1}, "needs a plan_id"),
        ("POST /x", {"plan_id": "p", "price": 3}, "unknown RouteConfig field 'price'"),
        ("POST /x", {"plan_id": ""}, "non-empty plan id"),
        ("POST /x", {"plan_id": "p", "credits": True}, "must be an int or a function"),
        ("POST /x", {"plan_id": "p", "credits": "2"}, "must be an int or a function"),
        ("POST /x", {"plan_id": "p", "credits": -1}, "must not be negative"),
        ("POST /x", {"plan_id": "p", "scheme": "btc"}, "scheme must be one of"),
        ("POST /x", {"plan_id": "p", "agent_id": 7}, "agent_id must be a string"),
        ("POST /x", "plan-1", "a RouteConfig or a dict"),
    ],
)
def test_bad_routes_say_what_to_write(key: str, config: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_route(key, config)


@pytest.mark.parametrize("build", [build_payment_app, payment_middleware])
async def test_no_service_url_refuses_to_build_with_the_variable_to_set(
    build: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26 #3: a sandbox key without baseUrl or SVC_SANDBOX_BASE_URL fails at build with
    one line, instead of an app that starts and answers 500 to every request."""
    monkeypatch.delenv("SVC_SANDBOX_BASE_URL", raising=False)
    routes = {"POST /x": RouteConfig(plan_id="p")}
    with pytest.raises(ConfigError) as refused:
        build(routes, {"svcApiKey": "sandbox:" + BUILDER_KEY.split(":", 1)[1]})
    text = str(refused.value)
    assert "cannot start" in text and "SVC_SANDBOX_BASE_URL" in text and "\n" not in text
    monkeypatch.setenv("SVC_SANDBOX_BASE_URL", "http://127.0.0.1:9/api/v1")
    built = build(routes, {"svcApiKey": "sandbox:" + BUILDER_KEY.split(":", 1)[1]})
    await (built[PAYMENTS] if isinstance(built, web.Application) else built).close()


def test_routes_must_be_a_mapping_and_settings_valid_config() -> None:
    with pytest.raises(ConfigError, match="routes must map"):
        RouteMap([("POST /x", RouteConfig(plan_id="p"))])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="paidBudgetSecs"):
        payment_middleware({}, {"paidBudgetSecs": -1})


async def test_prices_an_int_a_sync_and_an_async_function() -> None:
    request: Any = object()

    async def later(_request: web.Request) -> int:
        return 4

    assert await RouteConfig(plan_id="p", credits=2).price(request) == 2
    assert await RouteConfig(plan_id="p", credits=lambda _r: 3).price(request) == 3
    assert await RouteConfig(plan_id="p", credits=later).price(request) == 4
    with pytest.raises(TypeError, match="must return an int"):
        await RouteConfig(plan_id="p", credits=lambda _r: 2.5).price(request)


def test_only_single_use_tokens_are_remembered_and_the_cache_is_bounded() -> None:
    now = [0.0]
    cache = ReplayCache(ttl=10, maxsize=2, clock=lambda: now[0])
    answer = Answer(200, b"{}")
    reusable = make_token(PAYER)
    assert not is_single_use(reusable) and not is_single_use("not a token")
    cache.remember(reusable, "POST /x", "body", answer)
    assert cache.lookup(reusable, "POST /x") is None and len(cache) == 0
    tokens = [make_token(PAYER, nonce=f"n-{i}") for i in range(3)]
    for token in tokens:
        cache.remember(token, "POST /x", "body", answer)
    assert len(cache) == 2 and cache.lookup(tokens[0], "POST /x") is None
    kept = cache.lookup(tokens[2], "POST /x")
    assert kept is not None and kept.body == "body" and kept.answer is answer
    assert cache.lookup(tokens[2], "POST /y") is None  # another route
    now[0] = 11.0
    assert cache.lookup(tokens[2], "POST /x") is None  # expired


async def test_a_client_that_left_before_settle_is_not_charged(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    flow = market.endpoint.flow

    async def work() -> Answer:
        return Answer.json(200, {"done": True})

    request = PaidRequest(
        token=make_token(PAYER), url=market.url, work=work, connected=lambda: False
    )
    outcome = await flow.seller.runtime.run(flow.handle(request))
    assert outcome.kind is Outcome.WORK_FAILED and outcome.reason == "client disconnected"
    assert not outcome.delivered and outcome.result is None
    assert market.stub.calls["settle"] == 0 and market.stub.burned == 0
    assert flow.stats.abandoned == 1
    assert flow.book.known(PLAN_ID, PAYER) == (10, 0)  # nothing left in flight


async def test_the_seam_reports_each_outcome_protocol_neutrally(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=3))
    flow = market.endpoint.flow

    async def work() -> Answer:
        return Answer.json(200, {"done": True})

    def request(token: str | None, **kw: Any) -> PaidRequest:
        return PaidRequest(token=token, url=market.url, work=work, **kw)

    refused = await flow.seller.runtime.run(flow.handle(request(None)))
    assert refused.kind is Outcome.REFUSED and refused.envelope is not None
    assert refused.envelope.accepts[0].plan_id == PLAN_ID
    done = await flow.seller.runtime.run(flow.handle(request(make_token(PAYER), credits=1)))
    assert done.kind is Outcome.PAID and done.delivered
    assert done.receipt is not None and done.receipt["creditsRedeemed"] == "1"
    assert done.result == Answer.json(200, {"done": True})
    flow.max_in_flight = 0
    busy = await flow.seller.runtime.run(flow.handle(request(make_token(PAYER))))
    assert busy.kind is Outcome.UNAVAILABLE and busy.answer.status == 503


async def test_a_settle_queued_by_a_previous_run_is_retried_on_the_first_request(
    tmp_path: Any,
) -> None:
    stub = StubService(balance=5)
    await stub.start()
    queue_file = tmp_path / "queue.json"
    facts = PlanFacts.fallback(PLAN_ID, "local")
    envelope = build_envelope(facts, None, "http://x/ask", amount=1, max_timeout_secs=60)
    old = await SettleJournal.open(queue_file)  # the previous run's store
    await old.add(
        PendingSettle("req-old", PLAN_ID, PAYER, 1, make_token(PAYER), envelope.wire(), now())
    )
    # an owed settle whose payer was never known: retried all the same, nothing to restore
    await old.add(
        PendingSettle("req-anon", PLAN_ID, None, 1, make_token(PAYER), envelope.wire(), now())
    )
    await old.aclose()  # that run has ended: its lock is released
    settings = {
        "svcApiKey": BUILDER_KEY,
        "environment": "local",
        "baseUrl": stub.base_url,
        "settleQueuePath": str(queue_file),
    }
    app = build_payment_app({"POST /ask": RouteConfig(plan_id=PLAN_ID)}, settings)

    async def ask(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app.router.add_post("/ask", ask)  # the gate sells only what the app's router serves
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    middleware = app[PAYMENTS]
    try:
        assert stub.calls["settle"] == 0  # nothing retried before the app serves
        async with httpx.AsyncClient() as http:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}/ask"
            assert (await http.post(url, json={})).status_code == 402
        for _ in range(100):
            if middleware.stats.settle_recovered == 2:
                break
            await asyncio.sleep(0.02)
        assert middleware.stats.settle_recovered == 2 and stub.burned == 2
        await middleware.start()  # started once: nothing is retried again
        assert stub.calls["settle"] == 2
        known = middleware.flow.book.known(PLAN_ID, PAYER)
        assert known is not None and known[1] == 0  # the restored claim was closed by settling
    finally:
        await runner.cleanup()
        await stub.close()
    await middleware.close()  # closing twice is harmless


async def test_a_bare_middleware_starts_on_its_first_gated_request_and_sells_no_prompts(
    tmp_path: Any,
) -> None:
    stub = StubService(balance=5)
    await stub.start()
    settings = {
        "svcApiKey": BUILDER_KEY,
        "environment": "local",
        "baseUrl": stub.base_url,
        "settleQueuePath": str(tmp_path / "queue.json"),
        "planId": PLAN_ID,  # the flow's own plan, for its prompt entry below
    }
    middleware = payment_middleware({"POST /ask": RouteConfig(plan_id=PLAN_ID)}, settings)
    app = web.Application(middlewares=[middleware])  # not installed: no startup hook

    async def ask(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app.router.add_post("/ask", ask)
    app.router.add_get("/free", ask)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/free")).status_code == 200
            assert not middleware._started  # an ungated request opens nothing
            paid = await http.post(
                "/ask", json={}, headers={"payment-signature": make_token(PAYER)}
            )
        assert paid.status_code == 200 and "payment-response" in paid.headers
        assert middleware._started and stub.burned == 1
        # the flow behind the middleware sells routes: it has no prompt entry (no agent)
        flow = middleware.flow
        assert not hasattr(flow, "serve") and not hasattr(flow, "handler")
        assert stub.burned == 1
    finally:
        await runner.cleanup()
        await middleware.close()
        await stub.close()


def test_without_a_queue_path_each_set_of_plans_gets_its_own_settle_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.setenv("SVC_GATEWAY_CONFIG_DIR", str(tmp_path))
    settings = {"environment": "local", "baseUrl": "http://127.0.0.1:9/api/v1"}

    def queue_file(*plans: str, **extra: Any) -> str:
        routes = {f"POST /{p}": RouteConfig(plan_id=p) for p in plans}
        middleware = payment_middleware(routes, {**settings, **extra})  # no thread to stop
        return str(middleware.payments.settings.queue_path)

    one, same, other = queue_file("a", "b"), queue_file("b", "a"), queue_file("c")
    assert one == same and one != other
    assert one.startswith(str(tmp_path)) and "settle-queue-routes-" in one
    assert queue_file("a", settleQueuePath=str(tmp_path / "mine.json")) == str(
        tmp_path / "mine.json"
    )


async def test_the_paid_endpoint_replays_a_settled_v3_tokens_answer_to_its_retry(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    token = make_token(PAYER, nonce="n-retry")
    headers = {"payment-signature": token}
    async with httpx.AsyncClient(timeout=30) as http:
        first = await http.post(market.url, json={"prompt": "same words"}, headers=headers)
        retry = await http.post(market.url, json={"prompt": "same words"}, headers=headers)
    assert first.status_code == retry.status_code == 200
    assert retry.content == first.content
    assert retry.headers["payment-response"] == first.headers["payment-response"]
    assert market.stub.calls["settle"] == 1 and market.stub.burned == 1
    assert market.endpoint.stats.replayed == 1


async def test_concurrent_first_uses_open_one_settle_store(tmp_path: Any) -> None:
    settings = {
        "environment": "local",
        "baseUrl": "http://127.0.0.1:9/api/v1",
        "settleQueuePath": str(tmp_path / "queue.json"),
    }
    middleware = payment_middleware({"POST /x": RouteConfig(plan_id="p")}, settings)
    try:
        first, second = await asyncio.gather(
            middleware.flow.settler.store(), middleware.flow.settler.store()
        )
        assert first is second is middleware.flow.settler.queue
    finally:
        await middleware.close()
