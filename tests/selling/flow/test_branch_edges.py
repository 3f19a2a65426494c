"""Edge branches of the paid endpoint (issue 11): each test reaches one branch no other test
reaches and checks what a client, the credit book or the settle queue would notice there."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from aiohttp import web

from svc_gateway.encoding import decode_b64_json
from svc_gateway.selling.flow import admission as flow_module
from svc_gateway.selling.flow.plans import PlanFacts, PlanFactsCache, build_envelope
from svc_gateway.selling.state.book import Admission, CreditBook
from svc_gateway.selling.ways_in.http import AGENT_NAME_FALLBACK
from svc_gateway.service.models import Plan
from tests.support.fixtures import StubMarket, StubMarketFactory
from tests.support.stub_service import PLAN_ID, StubService, make_token

PAYER = "0x" + "aa" * 20
#: a token the stub's verify accepts (faked) but nobody can read a payer from: unmetered
OPAQUE_TOKEN = "opaque-token-without-a-payer"


async def ask(
    market: StubMarket, token: str | None, prompt: str = "hi", url: str | None = None
) -> httpx.Response:
    headers = {"payment-signature": token} if token is not None else {}
    async with httpx.AsyncClient(timeout=20) as http:
        return await http.post(url or market.url, json={"prompt": prompt}, headers=headers)


#: the service rejects this gateway's own key: not the payer's fault, the settle is queued
OWN_KEY_REJECTED = (401, {"code": "BCK.APIKEY.0004", "message": "invalid API key"})


async def drain(market: StubMarket) -> int:
    """Retry the settle queue once, on the plugin loop (where the flow's client lives)."""
    flow = market.endpoint.flow
    return await flow.seller.runtime.run(flow.settler.drain_queue())


def accept_without_payer(stub: StubService, request_id: str = "req-unmetered") -> None:
    """The facilitator accepts the token but names no payer (and the token names none)."""
    stub.faults["verify"] = (200, {"isValid": True, "agentRequestId": request_id})


# -- the credit book -------------------------------------------------------------------------


async def test_book_eviction_forgets_only_as_many_idle_payers_as_needed() -> None:
    async def read(plan_id: str, payer: str) -> int:
        return 5

    book = CreditBook(read, max_accounts=2)
    first, second, third = ("0x" + c * 40 for c in "123")
    for payer in (first, second):
        await book.release(await _admitted(book, payer))
    await _admitted(book, third)  # one over the bound: the oldest idle payer goes
    assert book.known("p", first) is None
    assert book.known("p", second) == (5, 0)  # still remembered: the bound was met already
    assert book.known("p", third) == (5, 1)


async def _admitted(book: CreditBook, payer: str) -> Admission:
    claim = await book.admit("p", payer, 1)
    assert isinstance(claim, Admission)
    return claim


async def test_book_a_cancelled_waiter_leaves_the_shared_read_running() -> None:
    gate = asyncio.Event()
    reads = 0

    async def read(plan_id: str, payer: str) -> int:
        nonlocal reads
        reads += 1
        await gate.wait()
        return 3

    book = CreditBook(read)
    reader = asyncio.create_task(book.admit("p", PAYER, 1))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(book.admit("p", PAYER, 1))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiter, 5)  # the waiter's own cancellation reaches it ...
    gate.set()
    claim = await asyncio.wait_for(reader, 5)  # ... and the reader still gets its answer
    assert isinstance(claim, Admission)
    assert reads == 1
    assert book.known("p", PAYER) == (3, 1)  # the cancelled waiter claimed nothing


# -- plan facts and envelopes ------------------------------------------------------------------


async def test_plan_cache_with_a_full_map_of_shared_fetches_fetches_directly() -> None:
    gate = asyncio.Event()
    fetched: Counter[str] = Counter()

    async def fetch(plan_id: str) -> Plan:
        fetched[plan_id] += 1
        if plan_id == "slow":
            await gate.wait()
        await asyncio.sleep(0)  # both "fast" reads are in flight together
        return Plan.model_validate({"id": plan_id})

    cache = PlanFactsCache(maxsize=1)
    slow = asyncio.create_task(cache.get("slow", fetch, "sandbox"))
    await asyncio.sleep(0)
    # the one shared-fetch slot is taken: these two are not joined, each fetches itself
    fast = await asyncio.gather(*(cache.get("fast", fetch, "sandbox") for _ in range(2)))
    assert fetched["fast"] == 2
    assert [f.plan_id for f in fast] == ["fast", "fast"]
    gate.set()
    assert (await asyncio.wait_for(slow, 5)).plan_id == "slow"
    assert fetched["slow"] == 1


def test_envelope_without_an_agent_names_none() -> None:
    facts = PlanFacts.fallback(PLAN_ID, "sandbox")
    envelope = build_envelope(
        facts, None, "http://127.0.0.1:1/svc/agent", amount=1, max_timeout_secs=60
    ).wire()
    extra = envelope["accepts"][0]["extra"]
    assert extra.get("agentId") is None  # the token may be for any agent of the plan
    assert extra["httpVerb"] == "POST"
    named = build_envelope(
        facts, "agent-9", "http://127.0.0.1:1/svc/agent", amount=1, max_timeout_secs=60
    ).wire()
    assert named["accepts"][0]["extra"]["agentId"] == "agent-9"


# -- the flow ----------------------------------------------------------------------------------


async def test_a_failing_handler_for_an_unmetered_payer_is_answered_and_not_charged(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    accept_without_payer(market.stub)
    response = await ask(market, OPAQUE_TOKEN, "status:404")
    assert response.status_code == 404
    assert response.json() == {"error": "handler said no"}
    assert market.stub.calls["settle"] == 0 and market.stub.burned == 0
    assert market.endpoint.stats.handler_failures == 1


async def test_a_deferred_settle_of_an_unmetered_payer_is_queued_then_given_up(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    flow = market.endpoint.flow
    accept_without_payer(market.stub)
    market.stub.faults["settle"] = OWN_KEY_REJECTED
    response = await ask(market, OPAQUE_TOKEN)
    assert response.status_code == 200  # the answer exists: delivered, settle queued
    assert "payment-response" not in response.headers
    assert "req-unmetered" in flow.settler.queue
    assert flow.stats.settle_deferred == 1 and flow.stats.settle_queue == 1
    market.stub.faults["settle"] = (404, {"code": "BCK.X402.0404", "message": "unknown request"})
    assert await drain(market) == 0  # definitively refused: dropped, not retried forever
    assert len(flow.settler.queue) == 0 and flow.stats.settle_queue == 0
    assert flow.stats.settle_lost == 1 and flow.stats.settle_recovered == 0
    assert market.stub.burned == 0


async def test_a_second_drain_while_one_runs_settles_nothing_twice(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    flow = market.endpoint.flow
    market.stub.faults["settle"] = OWN_KEY_REJECTED
    assert (await ask(market, make_token(PAYER))).status_code == 200
    assert len(flow.settler.queue) == 1
    assert flow.book.known(PLAN_ID, PAYER) == (10, 1)  # still owed: the claim is kept
    del market.stub.faults["settle"]
    market.stub.hang_calls.add("settle")
    before = market.stub.calls["settle"]
    first = asyncio.create_task(drain(market))
    for _ in range(500):  # bounded: until the first drain is inside its settle call
        if market.stub.calls["settle"] > before:
            break
        await asyncio.sleep(0.01)
    assert market.stub.calls["settle"] == before + 1
    assert await drain(market) == 0  # already draining: returns at once, no settle
    market.stub.release.set()
    assert await asyncio.wait_for(first, 10) == 1
    assert market.stub.calls["settle"] == before + 1 and market.stub.burned == 1
    assert flow.stats.settle_recovered == 1 and len(flow.settler.queue) == 0
    assert flow.book.known(PLAN_ID, PAYER) == (9, 0)  # the claim closed with the receipt


async def test_the_envelope_memo_is_bounded_and_still_names_each_agent(
    make_stub_market: StubMarketFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flow_module, "ENVELOPES_KEPT", 2)
    market = await make_stub_market(stub=StubService(balance=10))
    flow = market.endpoint.flow
    facts = PlanFacts.fallback(PLAN_ID, "sandbox")
    made = [flow.admitter.envelope(facts, f"agent-{i}", market.url, amount=1) for i in range(3)]
    assert len(flow.admitter.envelopes) <= 2
    assert [e.accepts[0].extra["agentId"] for e in made] == ["agent-0", "agent-1", "agent-2"]
    assert flow.admitter.envelope(facts, "agent-2", market.url, amount=1) is made[2]  # kept


async def test_a_sync_credits_function_returning_a_coroutine_is_awaited(
    make_stub_market: StubMarketFactory,
) -> None:
    async def price(request: dict[str, Any]) -> int:
        return 3 if "long" in request["prompt"] else 1

    market = await make_stub_market(
        stub=StubService(balance=10, max_amount=5),
        credits=lambda request: price(request),  # sync, but hands back an awaitable
    )
    response = await ask(market, make_token(PAYER), "a long question")
    assert response.status_code == 200
    receipt = decode_b64_json(response.headers["payment-response"])
    assert receipt is not None and receipt["creditsRedeemed"] == "3"
    assert market.stub.burned == 3


# -- the agent card and the routes -------------------------------------------------------------


class StubWithAgents(StubService):
    """The stub facilitator plus ``GET /protocol/agents/{id}`` (counted per agent id)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.agent_reads: Counter[str] = Counter()

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/api/v1/protocol/plans/{plan}", self._plan)
        app.router.add_get("/api/v1/protocol/agents/{agent}", self._agent)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.base_url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/api/v1"
        return self.base_url

    async def _agent(self, request: web.Request) -> web.Response:
        agent_id = request.match_info["agent"]
        self.agent_reads[agent_id] += 1
        main = {"name": f"Agent {agent_id}", "description": f"sells {agent_id}"}
        return web.json_response({"id": agent_id, "metadata": {"main": main}})


async def card_of(market: StubMarket) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=20) as http:
        response = await http.get(market.endpoint.card_url)
    assert response.status_code == 200, response.text
    card: dict[str, Any] = response.json()
    return card


async def test_remembered_agent_names_are_bounded_and_reread_after_the_reset(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = StubWithAgents()
    market = await make_stub_market(stub=stub)
    flow = market.endpoint.flow
    for i in range(17):  # 16 are remembered; the 17th starts the memo afresh
        flow.explicit_agent_id = f"a{i}"
        card = await card_of(market)
        assert card["name"] == f"Agent a{i}" and card["agentId"] == f"a{i}"
    flow.explicit_agent_id = "a16"
    assert (await card_of(market))["name"] == "Agent a16"
    assert stub.agent_reads["a16"] == 1  # remembered after the reset
    flow.explicit_agent_id = "a0"
    assert (await card_of(market))["name"] == "Agent a0"
    assert stub.agent_reads["a0"] == 2  # forgotten by the reset: read again


async def test_without_an_agent_the_card_and_the_402_name_no_agent(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = StubWithAgents()
    market = await make_stub_market(stub=stub, config={"agentId": None})
    assert market.endpoint.flow.agent_id() is None
    card = await card_of(market)
    assert card["name"] == AGENT_NAME_FALLBACK and card.get("agentId") is None
    assert card["url"] == market.url
    assert not stub.agent_reads  # no agent to look up
    refused = await ask(market, None)
    assert refused.status_code == 402
    envelope = decode_b64_json(refused.headers["payment-required"])
    assert envelope is not None
    assert envelope["accepts"][0]["extra"].get("agentId") is None


async def test_an_endpoint_at_the_root_serves_its_card_at_the_root(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubWithAgents(), config={"agentEndpointPath": "/"})
    assert urlsplit(market.url).path == "/"
    assert market.endpoint.card_url == market.url.rstrip("/") + "/.well-known/agent.json"
    card = await card_of(market)
    assert card["planId"] == PLAN_ID and card["name"] == "Agent agent-1"
    refused = await ask(market, None)  # the paid route itself answers at "/"
    assert refused.status_code == 402 and "payment-required" in refused.headers


async def test_an_ipv6_bind_address_is_bracketed_in_the_endpoint_url(
    make_stub_market: StubMarketFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    class LoopbackSite(web.TCPSite):  # the tests bind 127.0.0.1 only, whatever is asked
        def __init__(
            self, runner: web.BaseRunner, host: Any = None, port: Any = None, **options: Any
        ) -> None:
            super().__init__(runner, "127.0.0.1", port, **options)

    monkeypatch.setattr(web, "TCPSite", LoopbackSite)  # the endpoint looks it up here
    market = await make_stub_market(stub=StubService(balance=1), config={"paidEndpointHost": "::1"})
    bound = market.endpoint.bound_url
    assert bound is not None and bound.startswith("http://[::1]:")
    parts = urlsplit(bound)
    assert parts.hostname == "::1" and parts.port and parts.path == "/svc/agent"
    loopback = f"http://127.0.0.1:{parts.port}{parts.path}"
    refused = await ask(market, None, url=loopback)
    envelope = decode_b64_json(refused.headers["payment-required"])
    assert envelope is not None and envelope["resource"]["url"] == bound


async def test_a_stray_timeout_while_admitting_is_a_500_not_a_payment_outage(
    make_stub_market: StubMarketFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    flow = market.endpoint.flow

    async def broken_facts(plan_id: str) -> PlanFacts:
        raise TimeoutError("a bug's own timeout, not the paid budget")

    monkeypatch.setattr(flow, "facts", broken_facts)
    response = await ask(market, make_token(PAYER))
    assert response.status_code == 500  # not 503 "retry shortly": retrying will not help
    assert "nothing was charged" in response.json()["message"]
    assert "Retry-After" not in response.headers
    assert flow.stats.unavailable == 0
    assert market.stub.calls["verify"] == 0 and market.stub.burned == 0
