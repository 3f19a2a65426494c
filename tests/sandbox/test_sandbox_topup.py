"""Automatic top-up: a settle short of credits orders the plan through the token's delegation,
bounded by the delegation's budget, currency, expiry and maxTransactions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .support import CARD, Actor, Api, FakeClock, envelope
from .test_facilitator_edges import expire_after_the_check, mint_expiring

EURC = "0x808456652fdb597867f38412077a9182bf77359f"


async def delegation_item(api: Api, buyer: Actor, delegation_id: str) -> dict[str, Any]:
    listed = (await api.http.get("/delegation", headers=buyer.headers)).json()
    found: dict[str, Any] = next(d for d in listed if d["delegationId"] == delegation_id)
    return found


async def token_from(api: Api, buyer: Actor, plan_id: str, delegation_id: str) -> str:
    answer = await api.token_answer(buyer, plan_id, delegation_id)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["accessToken"])


async def plan_orders(api: Api, plan_id: str) -> int:
    return int((await api.http.get(f"/protocol/plans/{plan_id}")).json()["ordersCount"])


async def test_settle_orders_once_charges_the_delegation_and_counts_it_as_a_grant(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=3)
    delegation_id = await api.delegation(buyer, limit="250")
    token = await token_from(api, buyer, plan_id, delegation_id)
    verified = await api.verify(owner, token, plan_id)
    assert verified["isValid"] is True
    assert verified["agentRequest"]["balance"]["balance"] == "0"  # verify bought nothing
    assert (await delegation_item(api, buyer, delegation_id))["spentCents"] == "0"
    settled = (await api.settle_answer(owner, token, plan_id, verified["agentRequestId"])).json()
    assert settled["success"] is True and settled["orderTx"].startswith("0x")
    assert settled["orderTx"] != settled["transaction"]
    assert (settled["creditsRedeemed"], settled["remainingBalance"]) == ("1", "2")
    item = await delegation_item(api, buyer, delegation_id)
    assert (item["spentCents"], item["amountSpentCents"], item["remainingBudgetCents"]) == (
        "100",
        "100",
        "150",
    )
    assert item["transactionCount"] == 1
    assert await plan_orders(api, plan_id) == 1
    replay = (await api.settle_answer(owner, token, plan_id, verified["agentRequestId"])).json()
    assert replay == settled  # idempotent: no second order
    ledger = await api.ledger(plan_id, buyer)
    assert (ledger["granted"], ledger["auditGranted"], ledger["burned"]) == (3, 3, 1)
    assert ledger["granted"] == ledger["balance"] + ledger["burned"]


async def test_concurrent_settles_top_up_exactly_as_often_as_the_budget_pays(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=2)
    delegation_id = await api.delegation(buyer, limit="300")  # three orders of 100 cents
    token = await token_from(api, buyer, plan_id, delegation_id)
    verified = await asyncio.gather(*(api.verify(owner, token, plan_id) for _ in range(10)))
    assert all(v["isValid"] for v in verified)
    answers = await asyncio.gather(
        *(api.settle_answer(owner, token, plan_id, v["agentRequestId"]) for v in verified)
    )
    paid = [a.json() for a in answers if a.status_code == 200]
    refused = [a.json() for a in answers if a.status_code == 403]
    assert len(paid) == 6 and all(p["success"] for p in paid)
    assert sum("orderTx" in p for p in paid) == 3
    assert len(refused) == 4 and {r["code"] for r in refused} == {"BCK.X402.0023"}
    assert all(r["message"].startswith("Cannot order plan: the plan costs 100") for r in refused)
    assert "withhold the answer" in refused[0]["hint"].lower()
    ledger = await api.ledger(plan_id, buyer)
    assert (ledger["granted"], ledger["burned"], ledger["balance"]) == (6, 6, 0)
    assert (await delegation_item(api, buyer, delegation_id))["remainingBudgetCents"] == "0"


async def test_a_refused_top_up_orders_and_burns_nothing(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=3, high=5, low=1)
    await api.order(buyer, plan_id)  # 3 credits
    delegation_id = await api.delegation(buyer, limit="99")
    token = await token_from(api, buyer, plan_id, delegation_id)
    assert (await api.settle_answer(owner, token, plan_id, None, "2")).json()["success"] is True
    verified = await api.verify(owner, token, plan_id, "2")
    assert verified["invalidReason"] == (
        "insufficient credits: 1 available, 2 requested, and the plan cannot be ordered for it: "
        "the plan costs 100 cents and the delegation has 99 of its 99 cents left"
    )
    refused = await api.settle_answer(owner, token, plan_id, None, "2")
    assert refused.status_code == 403 and refused.json()["code"] == "BCK.X402.0023"
    too_much = (await api.settle_answer(owner, token, plan_id, None, "5")).json()
    assert too_much["success"] is False and too_much["transaction"] == ""
    assert too_much["errorReason"] == (
        "insufficient credits: 1 available, 5 requested (one order of the plan adds 3)"
    )
    assert await plan_orders(api, plan_id) == 1
    ledger = await api.ledger(plan_id, buyer)
    assert (ledger["granted"], ledger["burned"], ledger["balance"]) == (3, 2, 1)
    assert (await delegation_item(api, buyer, delegation_id))["spentCents"] == "0"


@pytest.mark.parametrize(
    ("plan_options", "reason"),
    [
        ({"token": EURC}, "the plan is priced in EURC and the delegation pays in usdc"),
        ({"token": "0x" + "0" * 40}, "the plan is priced in ETH, which a delegation budget"),
    ],
)
async def test_a_plan_priced_in_another_currency_is_not_topped_up(
    api: Api, owner: Actor, buyer: Actor, plan_options: dict[str, str], reason: str
) -> None:
    body: dict[str, Any] = {
        "metadataAttributes": {"name": "Foreign"},
        "priceConfig": {
            "tokenAddress": plan_options["token"],
            "amounts": ["1000000"],
            "receivers": [owner.address],
            "isCrypto": True,
        },
        "creditsConfig": {
            "isRedemptionAmountFixed": True,
            "redemptionType": 4,
            "durationSecs": "0",
            "amount": "5",
            "minAmount": "1",
            "maxAmount": "1",
        },
    }
    created = await api.http.post("/protocol/plans", json=body, headers=owner.headers)
    plan_id = str(created.json()["planId"])
    token = await api.token(buyer, plan_id)
    verified = await api.verify(owner, token, plan_id)
    assert verified["isValid"] is False and reason in verified["invalidReason"]
    refused = await api.settle_answer(owner, token, plan_id, None)
    assert refused.status_code == 403 and reason in refused.json()["message"]
    assert await api.credits(plan_id, buyer) == 0


async def test_a_plan_that_cannot_be_ordered_says_cannot_order_plan(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=1, max_orders=1)
    other = await api.account("first buyer")
    assert (await api.order(other, plan_id)).status_code == 200
    token = await api.token(buyer, plan_id)
    verified = await api.verify(owner, token, plan_id)
    assert "This plan reached its limit of 1 orders" in verified["invalidReason"]
    settled = await api.settle_answer(owner, token, plan_id, None)
    assert settled.status_code == 200
    assert settled.json()["success"] is False
    assert "the plan cannot be ordered for it" in settled.json()["errorReason"]


async def test_a_lapsed_time_plan_is_renewed_by_the_settle(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner, duration=600)
    token = await api.token(buyer, plan_id)
    first = (await api.settle_answer(owner, token, plan_id, None)).json()
    assert first["success"] is True and first["orderTx"] and first["creditsRedeemed"] == "0"
    again = (await api.settle_answer(owner, token, plan_id, None)).json()
    assert again["success"] is True and "orderTx" not in again  # access still active
    clock.advance(601)
    renewed = (await api.settle_answer(owner, token, plan_id, None)).json()
    assert renewed["orderTx"] and await plan_orders(api, plan_id) == 2


async def test_a_card_delegation_tops_up_a_fiat_plan_in_cents(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, fiat=True, price=2_500_000, credits=4)
    delegation_id = await api.delegation(buyer, "stripe", limit="300")
    answer = await api.token_answer(buyer, plan_id, delegation_id, scheme=CARD)
    token = answer.json()["accessToken"]
    paid = envelope(plan_id, CARD)
    settled = (await api.settle_answer(owner, token, plan_id, None, paid=paid)).json()
    assert settled["success"] is True and settled["orderTx"]
    assert (await delegation_item(api, buyer, delegation_id))["spentCents"] == "250"


async def test_a_delegation_that_expired_after_verify_cannot_top_up(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner, credits=2)
    delegation_id = await api.delegation(buyer, duration=30)
    token = await token_from(api, buyer, plan_id, delegation_id)
    verified = await api.verify(owner, token, plan_id)
    assert verified["isValid"] is True
    clock.advance(31)  # the request (verified in time) is still settleable
    late = await api.settle_answer(owner, token, plan_id, verified["agentRequestId"])
    assert late.status_code == 403 and late.json()["code"] == "BCK.X402.0013"
    assert await api.credits(plan_id, buyer) == 0


async def test_max_transactions_caps_settles_paid_from_the_balance_too(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=10)
    await api.order(buyer, plan_id)
    delegation_id = await api.delegation(buyer, max_transactions=2)
    token = await token_from(api, buyer, plan_id, delegation_id)
    for _ in range(2):
        assert (await api.settle_answer(owner, token, plan_id, None)).json()["success"] is True
    verified = await api.verify(owner, token, plan_id)
    assert verified["invalidReason"] == (
        "the delegation cannot pay: the delegation reached its maxTransactions (2)"
    )
    refused = await api.settle_answer(owner, token, plan_id, None)
    assert refused.status_code == 403
    assert refused.json()["message"] == (
        "The delegation cannot pay: the delegation reached its maxTransactions (2)"
    )
    assert await api.credits(plan_id, buyer) == 8


async def test_a_burn_that_fails_after_the_top_up_undoes_the_order(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_id = await api.plan(owner, credits=1, high=5)
    await mint_expiring(api, owner, plan_id, buyer, 2, 100)
    delegation_id = await api.delegation(buyer)
    token = await token_from(api, buyer, plan_id, delegation_id)
    verified = await api.verify(owner, token, plan_id, "3")  # 2 held + 1 from one order
    assert verified["isValid"] is True
    expire_after_the_check(monkeypatch, clock, 101)
    settled = await api.settle_answer(owner, token, plan_id, verified["agentRequestId"], "3")
    assert settled.json() == {
        "success": False,
        "errorReason": "insufficient credits",
        "transaction": "",
        "payer": buyer.address,
    }
    assert await plan_orders(api, plan_id) == 0
    assert (await delegation_item(api, buyer, delegation_id))["spentCents"] == "0"
    ledger = await api.ledger(plan_id, buyer)
    assert (ledger["granted"], ledger["burned"]) == (2, 0)


@pytest.mark.parametrize(
    ("price", "cents"),
    [(1_005_000, 101), (1_001_000, 101), (1_000_000, 100), (999_999, 100)],
    ids=["1.005", "1.001", "1.000", "0.999999"],
)
async def test_a_delegation_pays_the_plan_price_rounded_up_to_the_cent(
    api: Api, owner: Actor, buyer: Actor, price: int, cents: int
) -> None:
    """1.005 USDC costs 101 cents, as on the service: a budget one cent short of the rounded-up
    price buys nothing, and an order takes exactly that many cents."""
    plan_id = await api.plan(owner, credits=3, price=price)
    short = await api.delegation(buyer, limit=str(cents - 1))
    token = await token_from(api, buyer, plan_id, short)
    verified = await api.verify(owner, token, plan_id)
    assert verified["isValid"] is False
    assert (
        f"the plan costs {cents} cents and the delegation has {cents - 1}"
        in (verified["invalidReason"])
    )
    refused = await api.settle_answer(owner, token, plan_id, None)
    assert refused.status_code == 403 and refused.json()["code"] == "BCK.X402.0023"
    assert (await delegation_item(api, buyer, short))["spentCents"] == "0"
    exact = await api.delegation(buyer, limit=str(cents))
    token = await token_from(api, buyer, plan_id, exact)
    settled = (await api.settle_answer(owner, token, plan_id, None)).json()
    assert settled["success"] is True and settled["orderTx"].startswith("0x")
    item = await delegation_item(api, buyer, exact)
    assert (item["spentCents"], item["remainingBudgetCents"]) == (str(cents), "0")
    ledger = await api.ledger(plan_id, buyer)
    assert (ledger["granted"], ledger["burned"]) == (3, 1)
    assert ledger["granted"] == ledger["balance"] + ledger["burned"]
