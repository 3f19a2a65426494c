"""Payment methods (the test card and the wallet) and delegations (WIRE.md §6)."""

from __future__ import annotations

from typing import Any

import pytest

from .support import Actor, Api, FakeClock


async def test_every_account_has_a_test_card_and_its_wallet(api: Api, buyer: Actor) -> None:
    answer = await api.http.get("/payment-methods", headers=buyer.headers)
    assert answer.status_code == 200
    card, braintree, wallet = answer.json()
    assert card["id"].startswith("pm_sandbox_")
    assert braintree["id"].startswith("bt_sandbox_") and braintree["provider"] == "braintree"
    assert (braintree["type"], braintree["last4"]) == ("card", "1111")
    assert {k: card[k] for k in ("type", "brand", "last4", "expMonth", "expYear", "provider")} == {
        "type": "card",
        "brand": "visa",
        "last4": "4242",
        "expMonth": 12,
        "expYear": 2030,
        "provider": "stripe",
    }
    assert card["status"] == "Active" and card["alias"] is None
    assert wallet["id"] == buyer.address and wallet["type"] == "crypto_wallet"
    assert wallet["provider"] == "erc4337" and wallet["expYear"] == 0
    only_cards = await api.http.get(
        "/payment-methods", params={"provider": "stripe"}, headers=buyer.headers
    )
    assert [m["type"] for m in only_cards.json()] == ["card"]
    only_braintree = await api.http.get(
        "/payment-methods", params={"provider": "braintree"}, headers=buyer.headers
    )
    assert [m["id"] for m in only_braintree.json()] == [braintree["id"]]
    assert (await api.http.get("/payment-methods")).status_code == 401
    bad = await api.http.get("/payment-methods", params={"provider": "cash"}, headers=buyer.headers)
    assert bad.status_code == 400


async def test_cards_differ_between_accounts_and_alias_can_be_set(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    mine = (await api.http.get("/payment-methods", headers=buyer.headers)).json()[0]["id"]
    theirs = (await api.http.get("/payment-methods", headers=owner.headers)).json()[0]["id"]
    assert mine != theirs
    renamed = await api.http.patch(
        f"/payment-methods/{mine}", json={"alias": "work card"}, headers=buyer.headers
    )
    assert renamed.status_code == 200 and renamed.json()["alias"] == "work card"
    stolen = await api.http.patch(
        f"/payment-methods/{theirs}", json={"alias": "x"}, headers=buyer.headers
    )
    assert stolen.status_code == 404


def body(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "provider": "erc4337",
        "spendingLimitCents": 10000,
        "durationSecs": 3600,
        "currency": "usdc",
    }
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"currency": None}, "BCK.COMMON.0002"),
        ({"currency": "usd"}, "BCK.DELEGATION.0002"),
        ({"provider": "stripe", "currency": "usdc"}, "BCK.DELEGATION.0002"),
        ({"provider": "stripe", "currency": "usd"}, "BCK.DELEGATION.0002"),
        (
            {"provider": "stripe", "currency": "usd", "providerPaymentMethodId": "pm_x"},
            "BCK.DELEGATION.0002",
        ),
        ({"provider": "visa", "currency": "usd"}, "BCK.DELEGATION.0001"),
        ({"provider": "paypal"}, "BCK.DELEGATION.0002"),
        ({"spendingLimitCents": 0}, "BCK.COMMON.0002"),
        ({"durationSecs": "-1"}, "BCK.COMMON.0002"),
        ({"durationSecs": None}, "BCK.COMMON.0002"),
        ({"maxTransactions": "many"}, "BCK.COMMON.0002"),
    ],
)
async def test_invalid_delegations_are_400(
    api: Api, buyer: Actor, fields: dict[str, Any], code: str
) -> None:
    answer = await api.http.post("/delegation/create", json=body(**fields), headers=buyer.headers)
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == code


async def test_create_and_list_delegations(api: Api, buyer: Actor, clock: FakeClock) -> None:
    crypto = await api.http.post("/delegation/create", json=body(), headers=buyer.headers)
    assert crypto.status_code == 201
    card_id = (await api.http.get("/payment-methods", headers=buyer.headers)).json()[0]["id"]
    card = await api.http.post(
        "/delegation/create",
        json=body(
            provider="stripe", currency="usd", providerPaymentMethodId=card_id, maxTransactions=5
        ),
        headers=buyer.headers,
    )
    assert card.status_code == 201
    listed = (await api.http.get("/delegation", headers=buyer.headers)).json()
    assert isinstance(listed, list) and len(listed) == 2  # a bare array, as payments-py reads it
    items = {d["id"]: d for d in listed}
    first = items[crypto.json()["delegationId"]]
    assert first["delegationId"] == first["id"] and first["cardId"] is None
    assert first["provider"] == "erc4337" and first["currency"] == "usdc"
    assert first["providerPaymentMethodId"] == buyer.address
    assert first["spendingLimitCents"] == "10000" and first["status"] == "Active"
    assert first["spentCents"] == "0" and first["durationSecs"] == 3600
    card_item = items[card.json()["delegationId"]]
    assert card_item["providerPaymentMethodId"] == card_id and card_item["cardId"] == card_id
    clock.advance(3601)
    expired = (await api.http.get("/delegation", headers=buyer.headers)).json()
    assert {d["status"] for d in expired} == {"Expired"}
    other = await api.account("other")
    assert (await api.http.get("/delegation", headers=other.headers)).json() == []


async def test_a_braintree_delegation_takes_the_braintree_card_only(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    methods = (await api.http.get("/payment-methods", headers=buyer.headers)).json()
    ids = {m["provider"]: m["id"] for m in methods}
    body = {
        "provider": "braintree",
        "spendingLimitCents": "5000",
        "durationSecs": "3600",
        "currency": "usd",
    }
    stripe_card = await api.http.post(
        "/delegation/create",
        json={**body, "providerPaymentMethodId": ids["stripe"]},
        headers=buyer.headers,
    )
    assert stripe_card.status_code == 400
    made = await api.http.post(
        "/delegation/create",
        json={**body, "providerPaymentMethodId": ids["braintree"]},
        headers=buyer.headers,
    )
    assert made.status_code == 201, made.text
    renamed = await api.http.patch(
        f"/payment-methods/{ids['braintree']}", json={"alias": "BT"}, headers=buyer.headers
    )
    assert renamed.json()["alias"] == "BT" and renamed.json()["provider"] == "braintree"
