"""The state interfaces the paid flow talks to (``paid/state.py``): the in-process admission
book's ``restore`` and the balance a verify reports. In-process, no HTTP."""

from __future__ import annotations

import asyncio

from svc_gateway.selling.flow.admission import verified_balance
from svc_gateway.selling.state.book import Admission, CreditBook, Refusal
from svc_gateway.selling.state.protocols import AdmissionBook
from svc_gateway.service.models import VerifyResult

PAYER = "0x" + "aa" * 20


class Reads:
    def __init__(self, balance: int) -> None:
        self.balance = balance
        self.count = 0

    async def __call__(self, plan_id: str, payer: str) -> int:
        self.count += 1
        return self.balance


async def test_a_restored_claim_is_in_flight_and_the_balance_is_still_read() -> None:
    reads = Reads(6)
    book: AdmissionBook = CreditBook(reads)
    owed = await book.restore("p", PAYER.upper(), 3, "req-owed")
    assert owed == Admission("p", PAYER, 3)
    # 6 credits, 3 owed: 3 more answers, not 6
    for _ in range(3):
        assert isinstance(await book.admit("p", PAYER, 1), Admission)
    refusal = await book.admit("p", PAYER, 1)
    assert isinstance(refusal, Refusal) and refusal.available == 0
    assert reads.count == 1  # read once, despite the restored claim in flight
    await book.settled(owed, 3, 3)
    assert isinstance(book, CreditBook) and book.known("p", PAYER) == (3, 3)


async def test_restore_counts_owed_credits_even_beyond_the_balance() -> None:
    book = CreditBook(Reads(1))
    await book.restore("p", PAYER, 4)
    refusal = await book.admit("p", PAYER, 1)
    assert isinstance(refusal, Refusal) and refusal.available == -3
    assert "0 available" in refusal.reason


async def test_a_settle_during_a_balance_read_is_not_counted_twice_in_the_payers_favour() -> None:
    gate = asyncio.Event()

    async def read(plan_id: str, payer: str) -> int:
        await gate.wait()
        return 5  # read before the owed settle burned: the figure still holds its credit

    book = CreditBook(read)
    owed = await book.restore("p", PAYER, 1)
    admitting = asyncio.create_task(book.admit("p", PAYER, 4))
    await asyncio.sleep(0)
    await book.settled(owed, 1, None)  # the owed settle lands while the read is out
    gate.set()
    # the 5 still held the credit burned meanwhile: 4 are left, not 5
    assert isinstance(await admitting, Admission)
    assert isinstance(await book.admit("p", PAYER, 1), Refusal)
    assert book.known("p", PAYER) == (4, 4)


def test_the_balance_verify_reports_is_read_only_when_it_is_a_number() -> None:
    def verdict(agent_request: object) -> VerifyResult:
        return VerifyResult.model_validate({"isValid": True, "agentRequest": agent_request})

    assert verified_balance(verdict({"balance": {"balance": "7"}})) == 7
    assert verified_balance(verdict({"balance": {"balance": 3}})) == 3
    assert verified_balance(verdict({"balance": {"balance": "seven"}})) is None
    assert verified_balance(verdict({"balance": {"balance": True}})) is None
    assert verified_balance(verdict({"balance": "7"})) is None
    assert verified_balance(verdict(None)) is None
