"""Every row of SPEC.md's middleware state table, on the paid endpoint, over real HTTP."""

from __future__ import annotations

import base64
import json
import logging

import httpx
import pytest

from svc_gateway.encoding import decode_b64_json
from tests.support.market import (
    Market,
    MarketFactory,
    answer_lost_500,
    answer_lost_reset,
    refuse_500,
    settle_success_false,
)


async def ask(
    http: httpx.AsyncClient, market: Market, prompt: str, token: str | None
) -> httpx.Response:
    headers = {"payment-signature": token} if token else {}
    return await http.post(market.endpoint.url, json={"prompt": prompt}, headers=headers)


async def test_missing_token_is_402_with_a_decodable_envelope(
    market: Market, http: httpx.AsyncClient
) -> None:
    response = await ask(http, market, "hello", None)
    assert response.status_code == 402
    body = response.json()
    assert body["error"] == "Payment Required"
    assert "svc_getAccessToken" in body["message"] and "svc_orderPlan" in body["message"]
    envelope = decode_b64_json(response.headers["payment-required"])
    assert envelope is not None
    assert envelope["x402Version"] == 2
    assert envelope["resource"]["url"] == market.endpoint.url
    (accept,) = envelope["accepts"]
    assert accept["scheme"] == "svc:erc4337"
    assert accept["network"] == "eip155:84532"
    assert accept["planId"] == market.plan_id
    assert accept["extra"] == {"version": "1", "agentId": market.agent_id, "httpVerb": "POST"}
    assert "payment-response" not in response.headers


def tamper(token: str) -> str:
    """The same token with one character of its signature changed (JWT or base64url JSON)."""
    if token.count(".") == 2:
        head, payload, signature = token.split(".")
        flipped = ("A" if signature[5] != "A" else "B").join((signature[:5], signature[6:]))
        return f"{head}.{payload}.{flipped}"
    doc = decode_b64_json(token)
    assert doc is not None
    signature = str(doc["payload"]["signature"])
    doc["payload"]["signature"] = signature[:-1] + ("0" if signature[-1] != "0" else "1")
    raw = json.dumps(doc, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def test_tampered_token_is_402(market: Market, http: httpx.AsyncClient) -> None:
    await market.order()
    token = await market.token()
    response = await ask(http, market, "hello", tamper(token))
    assert response.status_code == 402
    assert "signature" in response.json()["reason"]
    assert decode_b64_json(response.headers["payment-required"]) is not None
    assert await market.balance() == 10


async def test_too_few_credits_is_402(
    market_without_top_up: Market, http: httpx.AsyncClient
) -> None:
    market = market_without_top_up
    token = await market.token()  # never ordered: balance 0, and no top-up
    response = await ask(http, market, "hello", token)
    assert response.status_code == 402
    assert "insufficient credits" in response.json()["reason"]
    envelope = decode_b64_json(response.headers["payment-required"])
    assert envelope is not None and "insufficient credits" in envelope["error"]


async def test_valid_token_answers_200_with_the_settle_receipt(
    market: Market, http: httpx.AsyncClient
) -> None:
    await market.order()
    token = await market.token()
    response = await ask(http, market, "two words", token)
    assert response.status_code == 200
    assert response.json()["wordCount"] == 2
    receipt = decode_b64_json(response.headers["payment-response"])
    assert receipt is not None
    assert receipt["success"] is True
    assert receipt["creditsRedeemed"] == "2"
    assert receipt["remainingBalance"] == "8"
    assert receipt["payer"] == market.subscriber_address.lower()
    assert receipt["network"] == "eip155:84532"
    assert receipt["transaction"]
    assert await market.balance() == 8
    assert market.endpoint.stats.settled == 1
    assert market.endpoint.stats.credits_settled == 2


@pytest.mark.parametrize("status", [404, 503])
async def test_handler_non_2xx_is_passed_through_and_not_charged(
    market: Market, http: httpx.AsyncClient, status: int
) -> None:
    await market.order()
    response = await ask(http, market, f"status:{status}", await market.token())
    assert response.status_code == status
    assert response.json() == {"error": "handler said no"}
    assert "payment-response" not in response.headers
    assert market.transport is None or market.transport.calls["x402/settle"] == 0
    assert market.endpoint.stats.settled == 0
    assert await market.balance() == 10


@pytest.mark.parametrize("prompt", ["raise", "unserialisable"])
async def test_handler_failure_is_500_without_traceback_and_not_charged(
    make_market: MarketFactory, http: httpx.AsyncClient, prompt: str
) -> None:
    market = await make_market(faults=True)
    await market.order()
    response = await ask(http, market, prompt, await market.token())
    assert response.status_code == 500
    body = response.json()
    assert body == {
        "error": "Internal Server Error",
        "message": "The agent failed to answer; nothing was charged.",
    }
    assert "Traceback" not in response.text and "RuntimeError" not in response.text
    assert "payment-response" not in response.headers
    assert market.transport is not None
    assert market.transport.calls["x402/verify"] == 1
    assert market.transport.calls["x402/settle"] == 0
    assert await market.balance() == 10


async def test_settle_outage_after_2xx_returns_200_queues_the_settle_and_logs(
    make_market: MarketFactory,
    http: httpx.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    market = await make_market(faults=True)
    market.endpoint.flow.settler.backoff = (0.0, 0.0)
    await market.order()
    assert market.transport is not None
    market.transport.always["x402/settle"] = refuse_500
    token = await market.token()
    with caplog.at_level(logging.ERROR, logger="svc_gateway.paid"):
        response = await ask(http, market, "four words right here", token)
    assert response.status_code == 200  # SPEC: settle failure after 2xx → 2xx unchanged
    assert response.json()["wordCount"] == 4
    assert "payment-response" not in response.headers
    assert market.transport.calls["x402/settle"] == 3  # retried on the same agentRequestId
    failures = [r for r in caplog.records if "settle failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.ERROR
    assert market.subscriber_address.lower() in failures[0].getMessage()  # names the payer
    assert token not in caplog.text
    stats = market.endpoint.stats
    assert stats.settle_failures == 1 and stats.settle_deferred == 1 and stats.settle_queue == 1
    assert await market.balance() == 10  # not burned yet: the queue owes it


async def test_settle_answering_success_false_withholds_the_answer_with_402(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    market = await make_market(faults=True)
    await market.order()
    assert market.transport is not None
    market.transport.always["x402/settle"] = settle_success_false
    response = await ask(http, market, "four words right here", await market.token())
    assert response.status_code == 402
    assert "wordCount" not in response.text  # the answer was not given away
    assert "ledger busy" in response.json()["reason"]
    assert decode_b64_json(response.headers["payment-required"]) is not None
    assert market.transport.calls["x402/settle"] == 1  # a definitive answer is not retried
    stats = market.endpoint.stats
    assert stats.settle_refused == 1 and stats.settle_queue == 0
    assert await market.balance() == 10


async def test_settle_that_fails_twice_then_succeeds_is_charged_once(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    market = await make_market(faults=True)
    await market.order()
    assert market.transport is not None
    # both failures happen *after* the service burned: only idempotency prevents a double charge
    market.transport.faults["x402/settle"] = [answer_lost_500, answer_lost_reset]
    response = await ask(http, market, "pay once", await market.token())
    assert response.status_code == 200
    receipt = decode_b64_json(response.headers["payment-response"])
    assert receipt is not None and receipt["creditsRedeemed"] == "2"
    assert receipt["remainingBalance"] == "8"
    assert market.transport.calls["x402/settle"] == 3
    assert await market.balance() == 8
    assert market.endpoint.stats.settled == 1
