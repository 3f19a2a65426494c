"""A metered call's receipts of a top-up: listed only when the balance rose by more than the
call burned, and never from a receipt without a balance (issue 44: purchases apart from calls)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from svc_gateway.account.receipts import ReceiptBook
from svc_gateway.approvals.gate import Ticket, Who
from svc_gateway.approvals.money import PlanValue
from svc_gateway.host import Caller, ToolCallContext
from svc_gateway.selling.handlers import Answer
from svc_gateway.selling.types import Outcome, PaidOutcome
from svc_gateway.selling.ways_in.metered_results import (
    NOTICE_KEY,
    balance,
    record_top_up,
    top_up_notice,
    with_notice,
)
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


def _ticket(rid: str = "", value: PlanValue | None = None) -> Ticket:
    return Ticket(None, Who(""), "tool", "p1", 100, 60, 1, value=value, rid=rid)


def test_a_top_up_notice_says_what_was_bought_in_money_and_credits_and_within_what() -> None:
    """Issue 44, item 6: the person sees the purchase; a notice names the approval it was
    bought within, or says its price is unknown rather than inventing one."""
    usd = PlanValue("USD", 1_000_000, 12, False)
    by_code = top_up_notice("image_gen", "p1", 3, 12, _ticket(value=usd))
    assert "12 credits for 1.00 USD, within the code you approved" in by_code
    assert "then used 3 credits (0.25 USD)" in by_code
    mandate = top_up_notice("image_gen", "p1", 1, 12, _ticket(rid="r1", value=usd))
    assert "within your /svc_allow allowance" in mandate and "1 credit (0.083334 USD)" in mandate
    unpriced = top_up_notice("image_gen", "p1", 1, 12, _ticket())
    assert "12 credits for price unknown" in unpriced
    model = Ticket(None, Who(""), "tool", "p1", 100, 60)
    assert "within the gateway's spending limit" in top_up_notice("t", "p1", 1, 5, model)


def test_a_notice_sits_beside_the_result_the_host_shows() -> None:
    """A JSON object (or its text, as Hermes's tools answer) gains ``svcNotice`` and stays
    valid JSON; other text gets a last line; another kind of result is left as it is."""
    said = "bought"
    assert with_notice({"url": "x"}, said) == {"url": "x", NOTICE_KEY: said}
    assert json.loads(with_notice('{"url": "x"}', said)) == {"url": "x", NOTICE_KEY: said}
    assert with_notice("a cat", said) == "a cat\n\n[svc] bought"
    assert with_notice("", said) == "[svc] bought"
    assert with_notice("[1, 2]", said) == "[1, 2]\n\n[svc] bought"
    assert with_notice([1, 2], said) == [1, 2, "[svc] bought"]  # AstrBot's parts
    image = object()
    assert with_notice(image, said) is image
