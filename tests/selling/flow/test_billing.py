"""Exact billing without holds (issue 10 "Selling"): verify reserves nothing, so the endpoint
admits a request only when the payer's known balance covers what is already in flight.

Over real loopback HTTP against the stub facilitator, whose verify is a dry run."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
import pytest

from svc_gateway.encoding import decode_b64_json
from svc_gateway.selling.handlers import default_handler
from svc_gateway.selling.state import book as billing
from svc_gateway.selling.state.book import Admission, CreditBook, Refusal
from tests.support.fixtures import StubMarketFactory
from tests.support.stub_service import StubService, make_token

PAYER = "0x" + "aa" * 20
OTHER = "0x" + "cc" * 20


class CountingHandler:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, request: dict[str, Any]) -> Any:
        self.calls += 1
        await asyncio.sleep(0)
        return await default_handler(request)


async def post(http: httpx.AsyncClient, url: str, token: str, prompt: str = "hi") -> httpx.Response:
    return await http.post(url, json={"prompt": prompt}, headers={"payment-signature": token})


async def test_200_concurrent_requests_with_credits_for_150_charge_exactly_150(
    make_stub_market: StubMarketFactory,
) -> None:
    handler = CountingHandler()
    market = await make_stub_market(stub=StubService(balance=150), handler=handler)
    token = make_token(PAYER)
    limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:
        responses = await asyncio.gather(
            *(post(http, market.url, token, f"question {i}") for i in range(200))
        )
    assert Counter(r.status_code for r in responses) == {200: 150, 402: 50}
    receipts = [decode_b64_json(r.headers.get("payment-response")) for r in responses]
    for response, receipt in zip(responses, receipts, strict=True):
        if response.status_code == 200:  # no 200 without a receipt
            assert receipt is not None and receipt["success"] is True
            assert receipt["creditsRedeemed"] == "1"
        else:
            assert receipt is None
            assert "insufficient credits" in response.json()["reason"]
    assert handler.calls == 150  # the 50 refused never reached the handler
    assert market.stub.calls["settle"] == 150
    # read once, then kept from receipts (a refusal with nothing in flight may re-read it, at
    # most once a second, in case the payer topped up)
    assert market.stub.calls["balance"] <= 5
    granted = 150
    assert granted == market.stub.balance_of(PAYER) + market.stub.burned  # conservation
    assert market.stub.burned == 150 == market.endpoint.stats.credits_settled
    assert sorted(int(r["remainingBalance"]) for r in receipts if r) == list(range(150))


async def test_payers_are_metered_separately(make_stub_market: StubMarketFactory) -> None:
    stub = StubService(balance=1)
    stub.balances[OTHER] = 2
    market = await make_stub_market(stub=stub)
    async with httpx.AsyncClient(timeout=30) as http:
        first = await asyncio.gather(*(post(http, market.url, make_token(PAYER)) for _ in range(3)))
        second = await asyncio.gather(
            *(post(http, market.url, make_token(OTHER)) for _ in range(3))
        )
    assert sorted(r.status_code for r in first) == [200, 402, 402]
    assert sorted(r.status_code for r in second) == [200, 200, 402]
    assert stub.burned == 3


async def test_payer_is_read_from_the_token_when_verify_does_not_name_it(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=2, expose=False))
    async with httpx.AsyncClient(timeout=30) as http:
        statuses = [(await post(http, market.url, make_token(PAYER))).status_code for _ in range(3)]
    assert statuses == [200, 200, 402]
    assert market.stub.calls["settle"] == 2


async def test_credits_spent_elsewhere_lower_the_known_balance_from_the_receipt(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=5))
    token = make_token(PAYER)
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await post(http, market.url, token)).status_code == 200  # the book: 4 left
        market.stub.balances[PAYER] = 2  # the payer spent 2 at another seller
        ok = await post(http, market.url, token)
        assert decode_b64_json(ok.headers["payment-response"])["remainingBalance"] == "1"
        assert (await post(http, market.url, token)).status_code == 200
        refused = await post(http, market.url, token)
    assert refused.status_code == 402
    assert market.stub.calls["settle"] == 3  # refused by the book, never settled
    assert market.stub.calls["balance"] == 1


async def test_a_payer_who_tops_up_is_admitted_again(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=1))
    token = make_token(PAYER)
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await post(http, market.url, token)).status_code == 200
        assert (await post(http, market.url, token)).status_code == 402
        market.stub.balances[PAYER] = 3  # bought more
        assert (await post(http, market.url, token)).status_code == 200
    assert market.stub.burned == 2


async def test_a_settle_refused_for_credits_withholds_the_answer_and_rereads_the_balance(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = StubService(balance=3)

    class SpentMeanwhile(CountingHandler):
        async def __call__(self, request: dict[str, Any]) -> Any:
            if request["prompt"] == "secret answer":
                stub.balances[PAYER] = 0  # spent elsewhere while the agent worked
            return await super().__call__(request)

    handler = SpentMeanwhile()
    market = await make_stub_market(stub=stub, handler=handler)
    token = make_token(PAYER)
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await post(http, market.url, token)).status_code == 200
        withheld = await post(http, market.url, token, "secret answer")  # the book says 2
        assert withheld.status_code == 402
        assert "insufficient credits" in withheld.json()["reason"]
        assert "secret answer" not in withheld.text
        assert decode_b64_json(withheld.headers["payment-required"])["error"]
        reads = market.stub.calls["balance"]
        stub.balances[PAYER] = 1  # bought one more
        again = await post(http, market.url, token)
    assert again.status_code == 200
    assert market.stub.calls["balance"] == reads + 1  # the refusal made the book read again
    assert handler.calls == 3
    assert market.endpoint.stats.settle_refused == 1
    assert stub.burned == 2 and stub.balance_of(PAYER) == 0


async def test_the_endpoint_charges_credits_per_request_within_a_wider_plan_range(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = StubService(balance=100, min_amount=1, max_amount=10)
    market = await make_stub_market(stub=stub, config={"creditsPerRequest": 3})
    async with httpx.AsyncClient(timeout=30) as http:
        response = await post(http, market.url, make_token(PAYER))
    receipt = decode_b64_json(response.headers["payment-response"])
    assert receipt is not None and receipt["creditsRedeemed"] == "3"
    assert stub.burned == 3 and stub.balance_of(PAYER) == 97


@pytest.mark.parametrize(("asked", "charged"), [(50, 10), (0, 2), (7, 7)])
async def test_a_pricing_function_is_clamped_to_the_plan_range(
    make_stub_market: StubMarketFactory, asked: int, charged: int
) -> None:
    stub = StubService(balance=100, min_amount=2, max_amount=10)
    market = await make_stub_market(stub=stub, credits=lambda _request: asked)
    async with httpx.AsyncClient(timeout=30) as http:
        response = await post(http, market.url, make_token(PAYER))
    receipt = decode_b64_json(response.headers["payment-response"])
    assert receipt is not None and receipt["creditsRedeemed"] == str(charged)
    assert stub.burned == charged


# -- the book itself ------------------------------------------------------------------------


class Reads:
    def __init__(self, *values: int) -> None:
        self.values = list(values)
        self.calls = 0

    async def __call__(self, plan_id: str, payer: str) -> int:
        self.calls += 1
        await asyncio.sleep(0)
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


async def test_book_concurrent_first_requests_share_one_balance_read() -> None:
    reads = Reads(2)
    book = CreditBook(reads)
    results = await asyncio.gather(*(book.admit("p", PAYER, 1) for _ in range(4)))
    assert reads.calls == 1
    assert [isinstance(r, Admission) for r in results].count(True) == 2
    refusal = next(r for r in results if isinstance(r, Refusal))
    assert refusal.available == 0 and "0 available" in refusal.reason
    assert book.known("p", PAYER.upper()) == (2, 2)  # addresses compare case-insensitively


async def test_book_release_returns_credits_and_settled_spends_them() -> None:
    book = CreditBook(Reads(3))
    a = await book.admit("p", PAYER, 2)
    assert isinstance(a, Admission)
    assert isinstance(await book.admit("p", PAYER, 2), Refusal)
    await book.release(a)
    assert book.known("p", PAYER) == (3, 0)
    b = await book.admit("p", PAYER, 2)
    assert isinstance(b, Admission)
    await book.settled(b, 2, 1)
    assert book.known("p", PAYER) == (1, 0)


async def test_book_receipt_out_of_order_is_not_taken_for_outside_spending() -> None:
    book = CreditBook(Reads(10))
    first, second = await book.admit("p", PAYER, 1), await book.admit("p", PAYER, 1)
    assert isinstance(first, Admission) and isinstance(second, Admission)
    await book.settled(second, 1, 8)  # the service settled both; this receipt says 8 left
    assert book.known("p", PAYER) == (9, 1)  # the first is still in flight: no correction
    await book.settled(first, 1, 9)  # an older figure arrives late
    assert book.known("p", PAYER) == (8, 0)


async def test_book_spending_elsewhere_keeps_the_settles_still_in_flight_claimed() -> None:
    book = CreditBook(Reads(10))
    first, second = await book.admit("p", PAYER, 1), await book.admit("p", PAYER, 1)
    assert isinstance(first, Admission) and isinstance(second, Admission)
    await book.settled(first, 1, 5)  # 4 credits were spent elsewhere; the second is still in flight
    assert book.known("p", PAYER) == (6, 1)  # 5 left plus the 1 in flight, which may settle
    await book.settled(second, 1, 5)  # it was already inside the 5
    assert book.known("p", PAYER) == (5, 0)


async def test_book_refused_blocks_the_payer_until_in_flight_is_done_then_rereads() -> None:
    reads = Reads(5, 1)
    book = CreditBook(reads)
    a, b = await book.admit("p", PAYER, 1), await book.admit("p", PAYER, 1)
    assert isinstance(a, Admission) and isinstance(b, Admission)
    await book.refused(a)
    assert isinstance(await book.admit("p", PAYER, 1), Refusal)  # b still in flight
    assert reads.calls == 1
    await book.settled(b, 1, None)
    assert isinstance(await book.admit("p", PAYER, 1), Admission)  # read again: 1
    assert reads.calls == 2


async def test_book_rereads_a_stale_balance_and_forgets_idle_payers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    reads = Reads(1, 4)
    book = CreditBook(reads, clock=lambda: now[0], max_accounts=1)
    a = await book.admit("p", PAYER, 1)
    assert isinstance(a, Admission)
    await book.settled(a, 1, 0)
    now[0] = billing.BALANCE_TTL_SECS + 1
    b = await book.admit("p", PAYER, 1)
    assert isinstance(b, Admission)  # the stale 0 was re-read: 4
    assert reads.calls == 2
    await book.admit("p", OTHER, 1)  # PAYER has a request in flight: kept
    assert book.known("p", PAYER) == (4, 1)
    await book.release(b)
    await book.admit("p", "0x" + "dd" * 20, 1)  # now the idle PAYER is forgotten first
    assert book.known("p", PAYER) is None
    assert book.known("p", OTHER) == (4, 1)


async def test_book_a_failed_read_reaches_every_waiter_and_is_not_cached() -> None:
    class Boom(Exception):
        pass

    calls = 0

    async def read(plan_id: str, payer: str) -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if calls == 1:
            raise Boom
        return 1

    book = CreditBook(read)
    results = await asyncio.gather(
        *(book.admit("p", PAYER, 1) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, Boom) for r in results)
    assert calls == 1
    assert isinstance(await book.admit("p", PAYER, 1), Admission)


async def test_book_a_cancelled_reader_does_not_strand_its_waiters() -> None:
    gate = asyncio.Event()
    calls = 0

    async def read(plan_id: str, payer: str) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            await gate.wait()
        return 1

    book = CreditBook(read)
    first = asyncio.create_task(book.admit("p", PAYER, 1))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(book.admit("p", PAYER, 1))
    await asyncio.sleep(0)
    first.cancel()
    result = await asyncio.wait_for(waiter, 5)
    assert isinstance(result, Admission)
    assert calls == 2
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_book_rereads_a_balance_exactly_at_its_ttl() -> None:
    now = [0.0]
    reads = Reads(5, 2)
    book = CreditBook(reads, clock=lambda: now[0])
    a = await book.admit("p", PAYER, 1)
    assert isinstance(a, Admission)
    await book.settled(a, 1, None)  # 4 left, as far as the book knows
    now[0] = billing.BALANCE_TTL_SECS
    assert isinstance(await book.admit("p", PAYER, 1), Admission)
    assert reads.calls == 2 == book.reads  # read again although 4 would have covered it
    assert book.known("p", PAYER) == (2, 1)


async def test_book_a_short_payer_with_nothing_in_flight_is_admitted_one_at_a_time() -> None:
    reads = Reads(0)
    book = CreditBook(reads)
    # verify passed with 0 credits: the token's delegation tops up at settle
    first = await book.admit("p", PAYER, 1, verified_balance=0)
    assert isinstance(first, Admission)
    second = await book.admit("p", PAYER, 1, verified_balance=0)
    assert isinstance(second, Refusal)  # one at a time until a settle shows the balance
    assert second.reason == (
        "insufficient credits: 0 available after the requests already in progress, 1 requested"
    )
    assert isinstance(await book.admit("p", PAYER, 1), Refusal)  # unreported: the same
    assert reads.calls == 1


async def test_book_a_receipt_showing_more_than_known_makes_the_next_admission_read() -> None:
    reads = Reads(0, 1)
    book = CreditBook(reads)
    topped = await book.admit("p", PAYER, 1, verified_balance=0)
    assert isinstance(topped, Admission)
    await book.settled(topped, 1, 1)  # the top-up bought 2, 1 burned: 1 left
    assert reads.calls == 1
    again = await book.admit("p", PAYER, 1, verified_balance=1)
    assert isinstance(again, Admission)  # covered by the figure read again, not by top-up
    assert reads.calls == 2 and book.known("p", PAYER) == (1, 1)
    assert isinstance(await book.admit("p", PAYER, 1, verified_balance=1), Refusal)


async def test_book_short_of_what_verify_saw_reads_again_unless_it_just_read() -> None:
    reads = Reads(1, 5)
    book = CreditBook(reads)
    a = await book.admit("p", PAYER, 1)
    assert isinstance(a, Admission)
    await book.settled(a, 1, None)  # the book: 0 left
    # verify saw 5 (the payer bought more): the book's 0 is old, read again
    assert isinstance(await book.admit("p", PAYER, 1, verified_balance=5), Admission)
    assert reads.calls == 2 and book.known("p", PAYER) == (5, 1)
    fresh = CreditBook(Reads(0))
    # read during this very call: fresher than verify's figure, so refused without a re-read
    refusal = await fresh.admit("p", PAYER, 1, verified_balance=3)
    assert isinstance(refusal, Refusal) and fresh.reads == 1


async def test_book_forgets_only_as_many_idle_payers_as_it_must() -> None:
    book = CreditBook(Reads(5), max_accounts=2)
    payers = ["0x" + c * 40 for c in "abc"]
    for payer in payers:
        claim = await book.admit("p", payer, 1)
        assert isinstance(claim, Admission)
        await book.release(claim)
    assert book.known("p", payers[0]) is None  # the oldest idle payer made room
    assert book.known("p", payers[1]) == (5, 0) and book.known("p", payers[2]) == (5, 0)
