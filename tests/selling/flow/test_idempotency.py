"""Idempotency keys in the one flow (issue 46): a retry with the same key gets the answer it
paid for, never a second verify, settle or run; another request under the key is 422; a key
still running is 409; only what was paid for is kept. Over loopback HTTP to the paid endpoint,
the facilitator a stub that counts its calls and burns."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import pytest
from x402.extensions.payment_identifier import (
    PAYMENT_IDENTIFIER,
    append_payment_identifier_to_extensions,
    extract_payment_identifier,
)
from x402.schemas import PaymentPayload

from svc_gateway.selling.flow import idempotency
from svc_gateway.selling.handlers import Answer
from svc_gateway.selling.state.idempotency import Kept, MemoryIdempotency, State
from svc_gateway.selling.state.redis_idempotency import RedisIdempotency
from svc_gateway.selling.state.redis_store import connect_client
from svc_gateway.selling.state.stats import PaidStats
from svc_gateway.selling.types import PaidRequest
from tests.support import LogCollector
from tests.support.fixtures import StubMarketFactory
from tests.support.redis_server import RedisServer
from tests.support.stub_service import StubService, make_token

PAYER = "0x" + "aa" * 20
OTHER = "0x" + "bb" * 20
KEY = "query-7b0c2f5e-0a4f-4a57-9f55-1c2d3e4f5a6b"


async def post(
    http: httpx.AsyncClient, url: str, token: str, prompt: str = "hi", key: str | None = KEY
) -> httpx.Response:
    headers = {"payment-signature": token}
    if key is not None:
        headers["Idempotency-Key"] = key
    return await http.post(url, json={"prompt": prompt}, headers=headers)


def decoded(header: str) -> Any:
    return json.loads(base64.b64decode(header + "=" * (-len(header) % 4)))


async def test_a_retry_with_the_same_key_gets_the_same_answer_and_receipt_and_pays_once(
    make_stub_market: StubMarketFactory,
) -> None:
    ran: list[str] = []

    async def handler(request: dict[str, Any]) -> Any:
        ran.append(request["prompt"])
        return {"answer": f"answer {len(ran)}"}

    market = await make_stub_market(stub=StubService(balance=10), handler=handler)
    token = make_token(PAYER)  # reusable: without the key a retry would pay again
    async with httpx.AsyncClient(timeout=30) as http:
        first = await post(http, market.url, token)
        retry = await post(http, market.url, token)
    assert first.status_code == retry.status_code == 200
    assert retry.json() == first.json() == {"answer": "answer 1"}
    assert retry.headers["payment-response"] == first.headers["payment-response"]
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert ran == ["hi"]
    assert market.stub.calls["verify"] == 1 and market.stub.calls["settle"] == 1
    assert market.stub.burned == 1 and market.stub.balance_of(PAYER) == 9
    assert market.endpoint.stats.replayed == 1


async def test_the_same_key_with_another_body_is_422_and_charges_nothing(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    token = make_token(PAYER)
    async with httpx.AsyncClient(timeout=30) as http:
        first = await post(http, market.url, token, "one question")
        other = await post(http, market.url, token, "another question")
    assert first.status_code == 200
    assert other.status_code == 422
    assert other.json()["error"] == "idempotency_key_reused"
    assert market.stub.calls["verify"] == 1 and market.stub.burned == 1
    assert market.stub.balance_of(PAYER) + market.stub.burned == 10


async def test_the_same_key_while_the_first_runs_is_409_and_never_a_second_run(
    make_stub_market: StubMarketFactory,
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    ran: list[str] = []

    async def handler(request: dict[str, Any]) -> Any:
        ran.append(request["prompt"])
        started.set()
        await release.wait()
        return {"answer": "slow"}

    market = await make_stub_market(stub=StubService(balance=10), handler=handler)
    runtime = market.endpoint.flow.seller.runtime
    token = make_token(PAYER)
    async with httpx.AsyncClient(timeout=30) as http:
        first = asyncio.create_task(post(http, market.url, token))
        await runtime.run(started.wait())
        second = await post(http, market.url, token)
        runtime.loop.call_soon_threadsafe(release.set)
        done = await first
        after = await post(http, market.url, token)
    assert second.status_code == 409 and second.headers["Retry-After"] == "2"
    assert second.json()["error"] == "idempotency_key_in_use"
    assert done.status_code == 200 and after.json() == done.json() == {"answer": "slow"}
    assert ran == ["hi"] and market.stub.burned == 1 and market.stub.calls["verify"] == 1


async def test_a_refused_or_failed_request_is_not_kept_so_its_retry_is_judged_afresh(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = StubService(balance=0)
    market = await make_stub_market(stub=stub)
    token = make_token(PAYER)
    async with httpx.AsyncClient(timeout=30) as http:
        refused = await post(http, market.url, token, key="key-of-a-refused-request")
        stub.balances[PAYER] = 5
        paid = await post(http, market.url, token, key="key-of-a-refused-request")
        failed = await post(http, market.url, token, "status:500", key="key-of-a-failed-one")
        again = await post(http, market.url, token, "status:500", key="key-of-a-failed-one")
    assert refused.status_code == 402 and paid.status_code == 200
    assert "Idempotent-Replayed" not in paid.headers
    assert failed.status_code == again.status_code == 500
    assert "Idempotent-Replayed" not in again.headers
    assert stub.burned == 1 and stub.balance_of(PAYER) == 4
    assert stub.calls["verify"] == 4  # each judged afresh: none replayed


async def test_a_key_is_bound_to_its_payer(make_stub_market: StubMarketFactory) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    async with httpx.AsyncClient(timeout=30) as http:
        mine = await post(http, market.url, make_token(PAYER), "mine")
        theirs = await post(http, market.url, make_token(OTHER), "theirs")
    assert mine.status_code == theirs.status_code == 200
    assert "Idempotent-Replayed" not in theirs.headers
    assert market.stub.burned == 2


async def test_a_retry_with_a_new_token_of_the_same_payer_is_verified_then_replayed(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    async with httpx.AsyncClient(timeout=30) as http:
        first = await post(http, market.url, make_token(PAYER, nonce="n-1"))
        retry = await post(http, market.url, make_token(PAYER, nonce="n-2"))
    assert retry.status_code == 200 and retry.json() == first.json()
    assert retry.headers["payment-response"] == first.headers["payment-response"]
    assert market.stub.calls["verify"] == 2 and market.stub.calls["settle"] == 1
    assert market.stub.burned == 1


async def test_a_token_that_does_not_verify_as_the_payer_gets_no_kept_answer(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = StubService(balance=10)
    market = await make_stub_market(stub=stub)
    async with httpx.AsyncClient(timeout=30) as http:
        first = await post(http, market.url, make_token(PAYER, nonce="n-1"), "secret answer")
        stub.faults["verify"] = (200, {"isValid": False, "invalidReason": "bad signature"})
        forged = await post(http, market.url, make_token(PAYER, nonce="forged"), "secret answer")
    assert first.status_code == 200
    assert forged.status_code == 422 and "secret" not in forged.text
    assert stub.burned == 1


async def test_an_answer_over_the_size_bound_is_replayed_as_its_receipt_with_a_note(
    make_stub_market: StubMarketFactory,
) -> None:
    async def handler(request: dict[str, Any]) -> Any:
        return {"answer": "x" * 500}

    market = await make_stub_market(
        stub=StubService(balance=10), handler=handler, config={"idempotencyMaxAnswerBytes": 100}
    )
    token = make_token(PAYER)
    async with httpx.AsyncClient(timeout=30) as http:
        first = await post(http, market.url, token)
        retry = await post(http, market.url, token)
    assert first.status_code == 200 and len(first.content) > 500
    assert retry.status_code == 410
    assert retry.json()["error"] == "idempotency_answer_not_kept"
    assert retry.headers["payment-response"] == first.headers["payment-response"]
    assert retry.json()["receipt"] == decoded(first.headers["payment-response"])
    assert market.stub.burned == 1


async def test_a_malformed_key_is_400_before_anything_is_asked(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    async with httpx.AsyncClient(timeout=30) as http:
        bad = await post(http, market.url, make_token(PAYER), key="no spaces please")
        long = await post(http, market.url, make_token(PAYER), key="k" * 256)
    assert bad.status_code == long.status_code == 400
    assert bad.json()["error"] == "idempotency_key_invalid"
    assert market.stub.calls["verify"] == 0


async def test_an_x402_client_sending_payment_identifier_is_understood(
    make_stub_market: StubMarketFactory,
) -> None:
    """The 402 declares ``payment-identifier``; x402's reference client appends its id to the
    declared extensions, and the seller keys the purchase on it (no header needed)."""
    market = await make_stub_market(stub=StubService(balance=10))
    async with httpx.AsyncClient(timeout=30) as http:
        required = await http.post(market.url, json={"prompt": "hi"})
        assert required.status_code == 402
        envelope = decoded(required.headers["payment-required"])
        assert envelope["extensions"][PAYMENT_IDENTIFIER]["info"] == {"required": False}
        extensions = append_payment_identifier_to_extensions(dict(envelope["extensions"]))
        document = decoded(make_token(PAYER))
        document["extensions"] = extensions
        payload = PaymentPayload.model_validate(
            {**document, "accepted": envelope["accepts"][0], "resource": envelope["resource"]}
        )
        ident = extract_payment_identifier(payload)
        assert ident is not None
        raw = json.dumps(document).encode()
        token = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        first = await post(http, market.url, token, key=None)
        retry = await post(http, market.url, token, key=None)
    assert first.status_code == retry.status_code == 200
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert market.stub.burned == 1


async def test_the_in_process_store_is_bounded_in_time_entries_and_leases() -> None:
    now = [0.0]
    store = MemoryIdempotency(ttl=100, lease=10, max_entries=2, clock=lambda: now[0])
    kept = Kept(Answer(200, b"{}"), {"transaction": "t"}, "digest")
    first = await store.begin("a", "fp")
    assert first.state is State.NEW
    assert (await store.begin("a", "fp")).state is State.RUNNING
    assert (await store.begin("a", "other")).state is State.REUSED
    await store.abandon("a", "not-the-lease")  # someone else's lease frees nothing
    assert (await store.begin("a", "fp")).state is State.RUNNING
    await store.finish("a", first.lease, kept)
    assert (await store.begin("a", "fp")).kept == kept
    held = await store.begin("b", "fp")
    now[0] = 11.0  # b's lease ran out (its replica died): the next request runs
    assert (await store.begin("b", "fp")).state is State.NEW
    assert held.lease
    now[0] = 101.0  # a's answer outlived its time to live
    assert (await store.begin("a", "fp")).state is State.NEW
    for scope in ("c", "d", "e"):
        await store.begin(scope, "fp")
    assert len(store) == 2


async def test_the_agent_card_says_how_a_retry_avoids_paying_twice(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    async with httpx.AsyncClient(timeout=30) as http:
        card = (await http.get(market.endpoint.card_url)).json()
    assert card["idempotency"] == {
        "header": "Idempotency-Key",
        "paymentIdentifier": True,
        "ttlSecs": 86400.0,
    }


async def test_a_key_without_a_token_is_an_ordinary_402(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(
            market.url, json={"prompt": "hi"}, headers={"Idempotency-Key": KEY}
        )
    assert answer.status_code == 402 and market.stub.calls["verify"] == 0


async def test_an_unreachable_key_store_refuses_before_verify_and_charges_nothing(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    flow = market.endpoint.flow
    client = connect_client("redis://127.0.0.1:1/0")  # nothing listens there
    store = RedisIdempotency(client, where="127.0.0.1:1/0", prefix="svc:s:")
    assert "127.0.0.1:1/0" in repr(store) and "entries" in repr(flow.retries.store)
    flow.retries.store = store
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            refused = await post(http, market.url, make_token(PAYER))
    finally:
        await client.aclose()
    assert refused.status_code == 503 and "Retry-After" in refused.headers
    assert market.stub.calls["verify"] == 0 and market.stub.burned == 0


async def test_a_key_store_lost_after_the_sale_still_delivers_the_paid_answer(
    make_stub_market: StubMarketFactory, redis_server: RedisServer, all_logs: LogCollector
) -> None:
    async def handler(request: dict[str, Any]) -> Any:
        redis_server.stop()  # Redis goes away while the work runs
        return {"answer": "paid for"}

    market = await make_stub_market(stub=StubService(balance=10), handler=handler)
    flow = market.endpoint.flow
    client = connect_client(redis_server.url)
    flow.retries.store = RedisIdempotency(client, where="test", prefix="svc:s:")
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            paid = await post(http, market.url, make_token(PAYER))
    finally:
        await client.aclose()
    assert paid.status_code == 200 and paid.json() == {"answer": "paid for"}
    assert market.stub.burned == 1
    assert "could not keep a paid answer for its idempotency key" in all_logs.text


def test_the_key_is_the_way_ins_else_the_payments_identifier_read_once_per_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(idempotency, "IDENTIFIERS_KEPT", 2)
    reads: list[str] = []
    real = idempotency.payment_identifier

    def counting(token: str | None) -> str | None:
        reads.append(str(token))
        return real(token)

    monkeypatch.setattr(idempotency, "payment_identifier", counting)
    retries = idempotency.Retries(
        MemoryIdempotency(), PaidStats(), max_answer_bytes=lambda: 1, verify_payer=_no_payer
    )

    def request(token: str | None, key: str | None = None) -> PaidRequest:
        return PaidRequest(token, "http://x/agent", _no_work, idempotency_key=key)

    document = decoded(make_token(PAYER))
    document["extensions"] = {PAYMENT_IDENTIFIER: {"info": {"required": False, "id": KEY}}}
    identified = base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")
    assert retries.key_of(request(identified, "from-the-header")) == "from-the-header"
    assert retries.key_of(request(None)) is None
    assert retries.key_of(request(identified)) == KEY
    assert retries.key_of(request(identified)) == KEY  # remembered: decoded once
    assert reads == [identified]
    for n in range(3):  # more tokens than are kept: the memory is cleared, never grows
        assert retries.key_of(request(make_token(PAYER, nonce=f"n-{n}"))) is None
    assert retries.key_of(request(identified)) == KEY and len(reads) == 5


async def _no_payer(token: str, request: PaidRequest) -> str | None:
    return None


async def _no_work() -> Answer:
    return Answer(200, b"{}")


async def test_a_retry_whose_new_token_cannot_be_verified_now_is_503_and_charges_nothing(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = StubService(balance=10)
    market = await make_stub_market(stub=stub)
    async with httpx.AsyncClient(timeout=30) as http:
        first = await post(http, market.url, make_token(PAYER, nonce="n-1"))
        stub.down.add("verify")
        retry = await post(http, market.url, make_token(PAYER, nonce="n-2"))
    assert first.status_code == 200
    assert retry.status_code == 503 and "nothing was charged" in retry.text
    assert stub.burned == 1 and stub.calls["settle"] == 1


async def test_a_retry_whose_new_token_is_not_verified_in_time_is_503(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = StubService(balance=10)
    market = await make_stub_market(stub=stub, config={"paidBudgetSecs": 0.5})
    async with httpx.AsyncClient(timeout=30) as http:
        first = await post(http, market.url, make_token(PAYER, nonce="n-1"))
        stub.hang_calls.add("verify")  # verify answers after paidBudgetSecs
        retry = await post(http, market.url, make_token(PAYER, nonce="n-2"))
    assert first.status_code == 200
    assert retry.status_code == 503 and "nothing was charged" in retry.text
    assert stub.burned == 1
