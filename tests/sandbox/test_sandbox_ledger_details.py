"""Ledger details a user or an auditor sees: checkout pages, redeem answers, the audit view."""

from __future__ import annotations

import re

import httpx

from .support import Actor, Api, FakeClock
from .test_sandbox_orders import fiat_checkout


async def test_checkout_pages_say_what_went_wrong_and_what_to_do(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner, fiat=True, price=2_000_000, credits=30)
    result = (await fiat_checkout(api, buyer, plan_id)).json()["result"]
    link = result["checkoutLink"]
    async with httpx.AsyncClient() as browser:
        unknown = await browser.get(f"{api.server.origin}/sandbox/checkout/cs_test_nope")
        assert unknown.status_code == 404
        assert "No such checkout session" in unknown.text
        # The link lapses at linkExpiresAt exactly, not a second later.
        clock.advance(result["linkExpiresAt"] - result["linkCreatedAt"])
        expired = await browser.get(link)
    assert expired.status_code == 410
    assert "This checkout link expired" in expired.text
    assert "Order the plan again" in expired.text
    assert await api.credits(plan_id, buyer) == 0


async def test_redeem_answers_name_the_transaction_and_refusals_say_what_to_do(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=10)
    other_plan = await api.plan(owner, credits=10)
    for plan in (plan_id, other_plan):
        assert (await api.order(buyer, plan)).status_code == 200
    body = {"agentRequestId": "r-1", "planId": plan_id, "redeemFrom": buyer.address, "amount": "2"}
    stolen = await api.http.post("/protocol/plans/redeem", json=body, headers=buyer.headers)
    assert stolen.status_code == 403
    assert "only the plan owner redeems its credits" in stolen.json()["message"]
    first = await api.http.post("/protocol/plans/redeem", json=body, headers=owner.headers)
    assert first.status_code == 200
    answer = first.json()
    assert answer["success"] is True and answer["amount"] == "2"
    assert re.fullmatch(r"0x[0-9a-f]{64}", answer["txHash"]), answer
    reused = await api.http.post(
        "/protocol/plans/redeem", json={**body, "planId": other_plan}, headers=owner.headers
    )
    assert reused.status_code == 400
    refusal = reused.json()
    assert "already redeemed for another plan or holder" in refusal["message"]
    assert "Use a new agentRequestId" in refusal["hint"]
    assert await api.credits(plan_id, buyer) == 8 and await api.credits(other_plan, buyer) == 10


async def test_audit_view_names_the_plan_the_holder_and_the_plan_type(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=5)
    assert (await api.order(buyer, plan_id)).status_code == 200
    answer = await api.http.get(f"/sandbox/ledger/{plan_id}/{buyer.address}")
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert view["planId"] == plan_id
    assert view["holderAddress"] == buyer.address
    assert view["planType"] == "credits"
    assert view["granted"] == view["balance"] == view["auditGranted"] == "5"


async def test_checkout_session_has_stripe_shaped_ids_and_crypto_plans_are_pointed_to_order(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    fiat = await api.plan(owner, fiat=True, price=2_000_000)
    first = (await fiat_checkout(api, buyer, fiat)).json()["result"]
    second = (await fiat_checkout(api, buyer, fiat)).json()["result"]
    for result in (first, second):
        assert re.fullmatch(r"cs_test_[0-9a-f]{32}", result["stripeCheckoutSessionId"]), result
        assert re.fullmatch(
            r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", result["clientReferenceId"]
        )
    assert first["clientReferenceId"] != second["clientReferenceId"]
    crypto = await api.plan(owner)
    refused = await fiat_checkout(api, buyer, crypto)
    assert refused.status_code == 400
    assert "priced in crypto and has no card checkout" in refused.json()["message"]
    assert "POST /protocol/plans/{planId}/order (svc_orderPlan)" in refused.json()["hint"]


async def test_spend_refusals_carry_the_no_credits_code_and_the_next_step(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=2)
    time_plan = await api.plan(owner, duration=600)
    for plan in (plan_id, time_plan):
        assert (await api.order(buyer, plan)).status_code == 200
    stranger_mint = await api.http.post(
        "/protocol/plans/mint",
        json={"planId": plan_id, "amount": 5, "creditsReceiver": buyer.address},
        headers=buyer.headers,
    )
    assert stranger_mint.status_code == 403
    assert "Only the owner of this plan may do that" in stranger_mint.json()["message"]
    cases = {
        "more than the balance": (plan_id, "3", "Order the plan or mint credits first"),
        "a time plan": (time_plan, "1", "Use a credits plan"),
    }
    for name, (plan, amount, hint) in cases.items():
        answer = await api.http.post(
            "/protocol/plans/burn",
            json={"planId": plan, "creditsAmount": amount},
            headers=buyer.headers,
        )
        assert answer.status_code == 400, name
        refusal = answer.json()
        assert refusal["code"] == "BCK.PROTOCOL.0050" and refusal["hint"] == hint, (name, refusal)
    assert await api.credits(plan_id, buyer) == 2 and await api.credits(time_plan, buyer) == 1


async def test_order_limits_say_why_and_what_to_buy_instead(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    trial = await api.plan(owner, trial=True)
    capped = await api.plan(owner, max_orders=1)
    for plan in (trial, capped):
        assert (await api.order(buyer, plan)).status_code == 200
    again = (await api.order(buyer, trial)).json()
    assert again["message"] == "This trial plan was already ordered by this account"
    assert again["hint"] == "Trial plans can be bought once per user; order a regular plan instead"
    full = (await api.order(await api.account("late"), capped)).json()
    assert full["message"] == "This plan reached its limit of 1 orders"
    assert full["hint"] == "Ask the plan owner for another plan"
