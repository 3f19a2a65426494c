"""Every error path of ``paid/flow.py`` and the plan-facts fallback of ``paid/plans.py``
(issue 11): each answers what a client would notice, and none of them charges anything."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from svc_gateway.encoding import decode_b64_json
from svc_gateway.selling.flow.plans import PlanFacts, PlanFactsCache
from svc_gateway.service.errors import NotFound, ServiceUnavailable
from svc_gateway.service.models import Plan
from tests.support import LogCollector
from tests.support.fixtures import StubMarket, StubMarketFactory
from tests.support.stub_service import AGENT_ID, PLAN_ID, StubService, make_token

PAYER = "0x" + "aa" * 20


async def ask(market: StubMarket, token: str | None, prompt: str = "hi") -> httpx.Response:
    headers = {"payment-signature": token} if token is not None else {}
    async with httpx.AsyncClient(timeout=20) as http:
        return await http.post(market.url, json={"prompt": prompt}, headers=headers)


def nothing_charged(market: StubMarket) -> bool:
    return market.stub.burned == 0 and market.stub.calls["settle"] == 0


async def test_busy_endpoint_answers_503_with_retry_after_before_any_payment_step(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.endpoint.flow.max_in_flight = 0
    response = await ask(market, make_token(PAYER))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert "busy" in response.json()["message"]
    assert market.stub.calls["verify"] == 0 and nothing_charged(market)
    assert market.endpoint.stats.unavailable == 1


async def test_an_outage_while_reading_the_plan_is_503_never_402(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["plan"] = (500, {"code": "TEST.DOWN", "message": "down"})
    response = await ask(market, make_token(PAYER))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    assert "payment-required" not in response.headers
    assert market.stub.calls["verify"] == 0 and nothing_charged(market)


async def test_an_outage_while_reading_the_balance_is_503(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["balance"] = (500, {"code": "TEST.DOWN", "message": "down"})
    response = await ask(market, make_token(PAYER))
    assert response.status_code == 503
    assert "payment-required" not in response.headers
    assert nothing_charged(market)


async def test_a_balance_the_service_will_not_show_leaves_the_payer_unmetered(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["balance"] = (404, {"code": "BCK.PLAN.0404", "message": "no balance"})
    response = await ask(market, make_token(PAYER))
    assert response.status_code == 200 and response.headers["payment-response"]
    assert "not metered" in all_logs.text


@pytest.mark.parametrize(
    "token",
    ["x" * 16385, "eyJ abc", "eyJ\tabc", "token,with,commas", "é" + "a" * 10],
    ids=["oversized", "space", "tab", "commas", "non-ascii"],
)
async def test_a_token_that_cannot_be_one_is_402_without_asking_the_service(
    make_stub_market: StubMarketFactory, token: str
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    async with httpx.AsyncClient(timeout=20) as http:
        response = await http.post(
            market.url, json={"prompt": "hi"}, headers={"payment-signature": token.encode()}
        )
    assert response.status_code == 402
    assert response.json()["reason"] == "The payment-signature is not a valid token"
    assert market.stub.calls["verify"] == 0 and nothing_charged(market)


async def test_a_token_of_exactly_the_limit_is_verified(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    response = await ask(market, "a" * 16384)
    assert response.status_code == 402  # the stub cannot read it, but it was asked
    assert market.stub.calls["verify"] == 1


@pytest.mark.parametrize("credits", [lambda r: 1 / 0, lambda r: "3", lambda r: True])
async def test_a_failing_pricing_function_is_500_and_nothing_is_verified(
    make_stub_market: StubMarketFactory, credits: Any, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10), credits=credits)
    response = await ask(market, make_token(PAYER))
    assert response.status_code == 500
    assert response.json()["message"] == "The agent could not price this request."
    assert market.stub.calls["verify"] == 0 and nothing_charged(market)
    assert "the credits function failed" in all_logs.text


async def test_an_async_pricing_function_prices_the_request(
    make_stub_market: StubMarketFactory,
) -> None:
    async def credits(request: dict[str, Any]) -> int:
        await asyncio.sleep(0)
        return len(request["prompt"])

    stub = StubService(balance=100, min_amount=1, max_amount=20)
    market = await make_stub_market(stub=stub, credits=credits)
    response = await ask(market, make_token(PAYER), "four")
    assert decode_b64_json(response.headers["payment-response"])["creditsRedeemed"] == "4"


@pytest.mark.parametrize(
    ("fault", "status", "said"),
    [
        ((403, {"code": "BCK.X402.0013", "message": "delegation expired"}), 402, None),
        ((402, {"code": "BCK.X402.0010", "message": "pay first"}), 402, None),
        ((403, {"code": "BCK.AUTH.0001", "message": "not allowed"}), 502, "BCK.AUTH.0001"),
        ((400, {"code": "BCK.X402.0100", "message": "bad"}), 502, "BCK.X402.0100"),
        ((401, {"code": "BCK.APIKEY.0004", "message": "bad key"}), 502, "API key"),
        ((200, {"isValid": False}), 402, None),
    ],
)
async def test_verify_errors_map_to_402_for_the_payer_and_502_for_the_operator(
    make_stub_market: StubMarketFactory,
    fault: tuple[int, dict[str, Any]],
    status: int,
    said: str | None,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["verify"] = fault
    response = await ask(market, make_token(PAYER))
    assert response.status_code == status
    assert nothing_charged(market)
    body = response.json()
    if status == 402:
        assert decode_b64_json(response.headers["payment-required"]) is not None
        expected = fault[1].get("message") or "The access token was not accepted"
        assert body["reason"] == expected
    else:
        assert "payment-required" not in response.headers
        assert said is not None and said in body["message"]
        assert "Nothing was charged" in body["message"]
        assert body["error"] == "Bad Gateway"
        assert body["message"].endswith("Nothing was charged; the agent's operator has been told.")


async def test_a_gateway_not_logged_in_answers_503_and_says_so(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10), config={"svcApiKey": None})
    response = await ask(market, make_token(PAYER))
    assert response.status_code == 503
    assert response.json() == {
        "error": "Service Unavailable",
        "message": "This agent cannot take payments yet: its operator is not logged in to the "
        "payment service. Nothing was charged.",
    }
    assert market.stub.calls["verify"] == 0 and nothing_charged(market)
    assert "/svc_login" in all_logs.text


async def test_a_rate_limited_service_is_503_with_its_retry_after_capped(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    flow = market.endpoint.flow
    answer = flow.refusals.outage(ServiceUnavailable("x", status=503), "verify")
    assert dict(answer.headers)["Retry-After"] == "5"
    exc = ServiceUnavailable("x", status=503)
    for given, shown in ((0.2, "1"), (7.4, "7"), (10_000, "300")):
        exc.retry_after = given  # type: ignore[attr-defined]
        assert dict(flow.refusals.outage(exc, "verify").headers)["Retry-After"] == shown


# -- plan facts ----------------------------------------------------------------------------


async def test_a_plan_that_cannot_be_read_falls_back_to_crypto_facts_uncached(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["plan"] = (404, {"code": "BCK.PLAN.0001", "message": "unknown plan"})
    first = await ask(market, None)
    second = await ask(market, None)
    assert first.status_code == second.status_code == 402
    envelope = decode_b64_json(first.headers["payment-required"])
    assert envelope is not None
    (accept,) = envelope["accepts"]
    assert (accept["scheme"], accept["network"], accept["planId"]) == (
        "svc:erc4337",
        "eip155:84532",
        PLAN_ID,
    )
    assert market.stub.calls["plan"] == 2  # a fallback is not cached
    assert "assuming a crypto plan" in all_logs.text
    del market.stub.faults["plan"]
    await ask(market, None)
    await ask(market, None)
    assert market.stub.calls["plan"] == 3  # the real facts are


def test_fallback_facts_do_not_bound_the_credits() -> None:
    facts = PlanFacts.fallback("p", "sandbox")
    assert (facts.scheme, facts.network) == ("svc:erc4337", "eip155:84532")
    assert (facts.min_amount, facts.max_amount) == (None, None)
    assert facts.clamp(7) == 7 and facts.clamp(-3) == 0
    assert PlanFacts.fallback("p", "live").network == "eip155:8453"


def test_clamp_ignores_a_maximum_below_the_minimum() -> None:
    facts = PlanFacts("p", "svc:erc4337", "n", min_amount=5, max_amount=2)
    assert facts.clamp(1) == 5 and facts.clamp(9) == 9


async def test_plan_cache_shares_one_fetch_and_propagates_outages() -> None:
    calls = 0

    async def fetch(plan_id: str) -> Plan:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        if plan_id == "down":
            raise ServiceUnavailable("down", status=503)
        if plan_id == "gone":
            raise NotFound("gone", status=404)
        return Plan.model_validate({"id": plan_id})

    cache = PlanFactsCache()
    facts = await asyncio.gather(*(cache.get("p", fetch, "sandbox") for _ in range(5)))
    assert calls == 1 and all(f is facts[0] for f in facts)
    assert cache.peek("p") is facts[0]
    results = await asyncio.gather(
        *(cache.get("down", fetch, "sandbox") for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, ServiceUnavailable) for r in results) and calls == 2
    assert (await cache.get("gone", fetch, "sandbox")).max_amount is None
    assert cache.peek("gone") is None
    cache.invalidate("p")
    assert cache.peek("p") is None
    await cache.get("p", fetch, "sandbox")
    cache.invalidate()
    assert cache.peek("p") is None


async def test_a_verify_outage_is_503_and_the_log_says_verify_failed_to_reach_the_service(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["verify"] = (503, {"code": "TEST.DOWN", "message": "down"})
    response = await ask(market, make_token(PAYER))
    assert response.status_code == 503 and nothing_charged(market)
    assert "Retry in" in response.json()["message"]
    assert "could not verify a payment: the payment service is unavailable" in all_logs.text


async def test_busy_answer_is_a_plain_service_unavailable(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.endpoint.flow.max_in_flight = 0
    response = await ask(market, make_token(PAYER))
    assert response.json() == {
        "error": "Service Unavailable",
        "message": "The agent is busy; nothing was charged. Retry in a second.",
    }


async def test_a_balance_outage_is_logged_with_the_service_error_code(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["balance"] = (500, {"code": "TEST.DOWN", "message": "down"})
    assert (await ask(market, make_token(PAYER))).status_code == 503
    assert "could not read the payer's balance: the payment service is unavailable (" in (
        all_logs.text
    )
    assert "(timeout)" not in all_logs.text


@pytest.mark.parametrize("case", ["invalid token", "too few credits"])
async def test_every_refusal_envelope_names_the_agent_and_the_endpoint(
    make_stub_market: StubMarketFactory, case: str
) -> None:
    balance, token = (10, "not a token!") if case == "invalid token" else (0, make_token(PAYER))
    market = await make_stub_market(stub=StubService(balance=balance))
    response = await ask(market, token)
    assert response.status_code == 402
    envelope = decode_b64_json(response.headers["payment-required"])
    assert envelope is not None and envelope["resource"]["url"] == market.url
    assert envelope["accepts"][0]["extra"]["agentId"] == AGENT_ID
    assert envelope["error"] == response.json()["reason"]


async def test_the_plan_and_agent_set_at_run_time_win_over_the_config(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    flow = market.endpoint.flow
    flow.seller.plan_id, flow.seller.agent_id = "plan-2", "agent-2"  # as svc_registerAgent does
    assert (flow.plan_id(), flow.agent_id()) == ("plan-2", "agent-2")
    flow.explicit_plan_id, flow.explicit_agent_id = "plan-3", "agent-3"
    assert (flow.plan_id(), flow.agent_id()) == ("plan-3", "agent-3")


async def test_every_failed_handler_answer_is_counted_and_free(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    for prompt, status in (("status:404", 404), ("status:503", 503), ("raise", 500)):
        assert (await ask(market, make_token(PAYER), prompt)).status_code == status
    assert market.endpoint.stats.handler_failures == 3
    assert nothing_charged(market)


async def test_a_json_subtype_body_is_read_like_json(make_stub_market: StubMarketFactory) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    async with httpx.AsyncClient(timeout=20) as http:
        response = await http.post(
            market.url,
            content=b'{"prompt": "hi"}',
            headers={"Content-Type": "application/merge-patch+json"},
        )
    assert response.status_code == 402  # read, then asked to pay (not a 400)


async def test_every_request_refused_for_want_of_a_plan_is_counted(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10), config={"planId": None})
    for _ in range(2):
        assert (await ask(market, make_token(PAYER))).status_code == 503
    assert market.endpoint.stats.unavailable == 2 and nothing_charged(market)


async def test_a_declared_oversize_body_is_413_before_it_is_sent(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10), config={"maxBodyBytes": 4096})
    port = int(market.url.split(":")[2].split("/")[0])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /svc/agent HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n"  # and no body: the length alone is refused
    )
    status = await asyncio.wait_for(reader.readline(), 20)
    writer.close()
    assert status.startswith(b"HTTP/1.1 413")
    assert market.stub.calls["verify"] == 0


async def test_an_oversize_body_that_came_whole_with_the_headers_is_413(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10), config={"maxBodyBytes": 4096})
    port = int(market.url.split(":")[2].split("/")[0])
    body = b'{"prompt": "' + b"x" * 5000 + b'"}'
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(  # chunked, so no length is declared; headers and body in one write
        b"POST /svc/agent HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n\r\n"
    )
    response = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    assert response.startswith(b"HTTP/1.1 413")
    assert b"The request body is larger than 4096 bytes." in response
    assert market.stub.calls["verify"] == 0 and nothing_charged(market)


@pytest.mark.parametrize(
    ("fault", "payer"),
    [
        (None, PAYER),  # verified: the token's payer
        ((200, {"isValid": False}), None),
        ((403, {"code": "BCK.X402.0013", "message": "delegation expired"}), None),
        ((402, {"code": "BCK.X402.0010", "message": "pay first"}), None),
    ],
)
async def test_verified_payer_names_only_a_payer_the_service_verified(
    make_stub_market: StubMarketFactory, fault: tuple[int, dict[str, Any]] | None, payer: str | None
) -> None:
    """A way in that must know the payer before it shows anything (A2A's tasks) asks the flow,
    which verifies without selling: nothing is claimed or settled."""
    market = await make_stub_market(stub=StubService(balance=10))
    if fault is not None:
        market.stub.faults["verify"] = fault
    flow = market.endpoint.flow
    found = await market.handle.runtime.run(flow.verified_payer(make_token(PAYER), market.url))
    assert found == payer
    assert await market.handle.runtime.run(flow.verified_payer("not a token!", market.url)) is None
    assert nothing_charged(market) and flow.stats.settled == 0


async def test_verified_payer_raises_when_the_service_cannot_say(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["verify"] = (403, {"code": "BCK.AUTH.0001", "message": "not allowed"})
    flow = market.endpoint.flow
    with pytest.raises(Exception, match="not allowed"):
        await market.handle.runtime.run(flow.verified_payer(make_token(PAYER), market.url))
    flow.explicit_plan_id, flow.seller.plan_id = None, None
    flow.seller.config = flow.seller.config.model_copy(update={"plan_id": None, "plans": []})
    assert await market.handle.runtime.run(flow.verified_payer(make_token(PAYER), "x")) is None
