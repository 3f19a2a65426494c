"""A metered call's receipts of a top-up: listed only when the balance rose by more than the
call burned, and never from a receipt without a balance (issue 44: purchases apart from calls)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from svc_gateway.account.receipts import ReceiptBook
from svc_gateway.host import Caller, ToolCallContext
from svc_gateway.selling.handlers import Answer
from svc_gateway.selling.types import Outcome, PaidOutcome
from svc_gateway.selling.ways_in.metered_results import balance, record_top_up
from svc_gateway.service.errors import TransportError

CTX = ToolCallContext("image_gen", {"p": 1}, "call-1", Caller("alice", "cli"))
PAYER: Any = SimpleNamespace(session=SimpleNamespace(address="0xabc"))


def outcome(remaining: object) -> PaidOutcome:
    receipt = {"remainingBalance": remaining} if remaining is not None else {}
    return PaidOutcome(Outcome.PAID, Answer.json(200, {}), receipt=receipt)


def test_a_top_up_is_kept_as_a_purchase_of_the_credits_it_bought() -> None:
    book = ReceiptBook()
    record_top_up(book, CTX, PAYER, "p1", 3, 0, outcome("9"))  # bought 12, burned 3
    (receipt,) = book.all()
    assert receipt.is_purchase and receipt.credits == 12 and receipt.identity == "cli:alice"
    assert "for tool image_gen" in receipt.what


def test_no_purchase_is_kept_without_a_rise_or_a_balance() -> None:
    book = ReceiptBook()
    record_top_up(book, CTX, PAYER, "p1", 3, 12, outcome("9"))  # paid from what it held
    record_top_up(book, CTX, PAYER, "p1", 3, 0, outcome(None))  # the receipt names no balance
    assert book.all() == []


async def test_a_balance_the_service_cannot_give_is_none() -> None:
    async def refused(plan_id: str) -> Any:
        raise TransportError("unreachable")

    payer: Any = SimpleNamespace(client=lambda: SimpleNamespace(get_plan_balance=refused))
    assert await balance(payer, "p1") is None
