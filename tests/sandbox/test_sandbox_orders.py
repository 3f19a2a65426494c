"""Crypto orders and the fiat checkout that completes an order exactly once."""

from __future__ import annotations

import httpx

from .support import Actor, Api, FakeClock


async def fiat_checkout(api: Api, buyer: Actor, plan_id: str) -> httpx.Response:
    return await api.http.post(
        "/fiat/stripe/payment",
        json={"planId": plan_id, "sessionType": "embedded"},
        headers=buyer.headers,
    )


async def test_fiat_plan_cannot_be_ordered_with_crypto(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, fiat=True, price=2_000_000)
    answer = await api.order(buyer, plan_id)
    assert answer.status_code == 400
    assert answer.json()["code"] == "BCK.PROTOCOL.0012"
    assert "/fiat/stripe/payment" in answer.json()["hint"]
    assert await api.credits(plan_id, buyer) == 0


async def test_free_fiat_plan_can_be_ordered_directly(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await api.plan(owner, fiat=True, price=0, credits=4)
    assert (await api.order(buyer, plan_id)).status_code == 200
    assert await api.credits(plan_id, buyer) == 4


async def test_order_needs_a_key_and_a_known_plan(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await api.plan(owner)
    assert (await api.http.post(f"/protocol/plans/{plan_id}/order")).status_code == 401
    unknown = await api.order(buyer, "987654321")
    assert unknown.status_code == 404


async def test_fiat_checkout_completes_the_order_once(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner, fiat=True, price=2_000_000, credits=30)
    answer = await fiat_checkout(api, buyer, plan_id)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["paymentStatus"] == "unpaid"
    assert result["stripeCheckoutSessionId"].startswith("cs_test_")
    assert result["linkExpiresAt"] - result["linkCreatedAt"] == 3600
    link = result["checkoutLink"]
    assert link == f"{api.server.origin}/sandbox/checkout/{result['stripeCheckoutSessionId']}"
    assert await api.credits(plan_id, buyer) == 0
    async with httpx.AsyncClient() as browser:
        page = await browser.get(link)
        assert page.status_code == 200 and "Payment complete" in page.text
        assert page.headers["content-type"].startswith("text/html")
        assert await api.credits(plan_id, buyer) == 30
        again = await browser.get(link)
        assert again.status_code == 200 and "already" in again.text.lower()
        assert await api.credits(plan_id, buyer) == 30
        assert (
            await browser.get(f"{api.server.origin}/sandbox/checkout/cs_nope")
        ).status_code == 404
    plan = (await api.http.get(f"/protocol/plans/{plan_id}")).json()
    assert plan["ordersCount"] == 1


async def test_fiat_checkout_link_expires_after_an_hour(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner, fiat=True, price=2_000_000)
    link = (await fiat_checkout(api, buyer, plan_id)).json()["result"]["checkoutLink"]
    clock.advance(3601)
    async with httpx.AsyncClient() as browser:
        assert (await browser.get(link)).status_code == 410
    assert await api.credits(plan_id, buyer) == 0


async def test_fiat_endpoint_rejects_crypto_plans_and_bad_bodies(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    crypto = await api.plan(owner)
    answer = await fiat_checkout(api, buyer, crypto)
    assert answer.status_code == 400 and answer.json()["code"] == "BCK.PROTOCOL.0013"
    for body in ({}, {"planId": ["x"]}, {"planId": crypto, "sessionType": 5}):
        bad = await api.http.post("/fiat/stripe/payment", json=body, headers=buyer.headers)
        assert bad.status_code == 400
    assert (await fiat_checkout(api, buyer, "12345")).status_code == 404


async def test_fiat_trial_and_max_orders_apply_at_checkout(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    trial = await api.plan(owner, fiat=True, price=1_000_000, trial=True)
    first = (await fiat_checkout(api, buyer, trial)).json()["result"]["checkoutLink"]
    second = (await fiat_checkout(api, buyer, trial)).json()["result"]["checkoutLink"]
    async with httpx.AsyncClient() as browser:
        assert (await browser.get(first)).status_code == 200
        assert (await browser.get(second)).status_code == 409
    refused = await fiat_checkout(api, buyer, trial)
    assert refused.status_code == 409 and refused.json()["code"] == "BCK.PROTOCOL.0048"
    assert await api.credits(trial, buyer) == 100
