"""Plans: registration rules, the plan object, the four kinds, limits, minting, balances."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from .support import Actor, Api, FakeClock, plan_body


async def register(http: httpx.AsyncClient, owner: Actor, body: dict[str, Any]) -> httpx.Response:
    return await http.post("/protocol/plans", json=body, headers=owner.headers)


def mutate(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(body))
    *parents, last = path.split(".")
    target = copy
    for part in parents:
        target = target[part]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return copy


@pytest.mark.parametrize(
    ("path", "value", "code"),
    [
        ("metadataAttributes.name", KeyError, "BCK.COMMON.0002"),
        ("metadataAttributes.name", "   ", "BCK.COMMON.0002"),
        ("metadataAttributes.tags", "not-a-list", "BCK.COMMON.0002"),
        ("priceConfig.amounts", ["1", "2"], "BCK.PROTOCOL.0010"),
        ("priceConfig.receivers", ["0x1234"], "BCK.COMMON.0002"),
        ("priceConfig.amounts", ["-5"], "BCK.COMMON.0002"),
        ("priceConfig.amounts", ["1.5"], "BCK.COMMON.0002"),
        ("priceConfig.isCrypto", "yes", "BCK.COMMON.0002"),
        ("priceConfig.tokenAddress", "USDC", "BCK.COMMON.0002"),
        ("creditsConfig.amount", "0", "BCK.PROTOCOL.0011"),
        ("creditsConfig.minAmount", "0", "BCK.PROTOCOL.0011"),
        ("creditsConfig.minAmount", "5", "BCK.PROTOCOL.0011"),
        ("creditsConfig.maxAmount", "3", "BCK.PROTOCOL.0011"),
        ("creditsConfig.redemptionType", 9, "BCK.COMMON.0002"),
        ("creditsConfig", KeyError, "BCK.COMMON.0002"),
        ("accessLimit", 5, "BCK.COMMON.0002"),
        ("metadataAttributes.accessLimit", "sometimes", "BCK.COMMON.0002"),
        ("maxOrders", "0", "BCK.COMMON.0002"),
    ],
)
async def test_invalid_plan_bodies_are_400_with_a_code(
    http: httpx.AsyncClient, owner: Actor, path: str, value: Any, code: str
) -> None:
    answer = await register(http, owner, mutate(plan_body(owner), path, value))
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == code
    assert answer.json()["message"]


async def test_access_limit_must_fit_the_duration(api: Api, owner: Actor) -> None:
    body = plan_body(owner, duration=600)
    body["accessLimit"] = "credits"
    answer = await register(api.http, owner, body)
    assert answer.status_code == 400 and answer.json()["code"] == "BCK.PROTOCOL.0011"


async def test_time_plan_with_no_duration_never_lapses(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    """The SDK's non-expirable time plan: ``accessLimit: "time"`` with ``durationSecs`` 0."""
    body = plan_body(owner, credits=1)
    body["accessLimit"] = "time"
    answer = await register(api.http, owner, body)
    assert answer.status_code == 201, answer.text
    plan_id = answer.json()["planId"]
    plan = (await api.http.get(f"/protocol/plans/{plan_id}")).json()
    assert plan["metadata"]["plan"]["accessLimit"] == "time"
    assert (await api.balance(plan_id, buyer))["isSubscriber"] is False
    assert (await api.order(buyer, plan_id)).status_code == 200
    clock.advance(100 * 365 * 24 * 3600)
    balance = await api.balance(plan_id, buyer)
    assert balance["isSubscriber"] is True and balance["planType"] == "time"
    token = await api.token(buyer, plan_id)
    settled = (await api.settle_answer(owner, token, plan_id, None)).json()
    assert settled["success"] is True and settled["creditsRedeemed"] == "0"


async def test_fixed_plan_needs_equal_min_and_max(http: httpx.AsyncClient, owner: Actor) -> None:
    body = plan_body(owner, low=1, high=3)
    body["creditsConfig"]["isRedemptionAmountFixed"] = True
    answer = await register(http, owner, body)
    assert answer.status_code == 400 and answer.json()["code"] == "BCK.PROTOCOL.0011"
    body["creditsConfig"]["isRedemptionAmountFixed"] = False
    assert (await register(http, owner, body)).status_code == 201


async def test_fiat_minimum_is_one_dollar_in_six_decimal_units(
    http: httpx.AsyncClient, owner: Actor
) -> None:
    cents_mistake = await register(http, owner, plan_body(owner, fiat=True, price=150))
    assert cents_mistake.status_code == 400
    assert cents_mistake.json()["code"] == "BCK.PROTOCOL.0047"
    assert "6-decimal" in cents_mistake.json()["hint"]
    assert (await register(http, owner, plan_body(owner, fiat=True, price=1_000_000))).is_success
    free_fiat = await register(http, owner, plan_body(owner, fiat=True, price=0))
    assert free_fiat.status_code == 201


async def test_big_numbers_keep_their_digits_and_unsafe_json_numbers_are_refused(
    api: Api, owner: Actor
) -> None:
    huge = "123456789012345678901234567890"
    plan_id = await api.plan(owner, price=int(huge), credits=10**30, high=10**20)
    plan = (await api.http.get(f"/protocol/plans/{plan_id}")).json()
    assert plan["registry"]["price"]["amounts"] == [huge]
    assert plan["registry"]["credits"]["amount"] == str(10**30)
    assert plan["registry"]["credits"]["maxAmount"] == str(10**20)
    unsafe = plan_body(owner)
    unsafe["priceConfig"]["amounts"] = [2**53]
    answer = await register(api.http, owner, unsafe)
    assert answer.status_code == 400 and answer.json()["code"] == "BCK.COMMON.0026"
    safe = plan_body(owner)
    safe["priceConfig"]["amounts"] = [2**53 - 1]
    assert (await register(api.http, owner, safe)).status_code == 201
    too_big = mutate(plan_body(owner), "creditsConfig.amount", str(2**256))
    assert (await register(api.http, owner, too_big)).status_code == 400


async def test_plan_object_has_the_wire_shape(api: Api, owner: Actor) -> None:
    crypto = (await api.http.get(f"/protocol/plans/{await api.plan(owner)}")).json()
    assert crypto["id"].isdigit() and 0 < int(crypto["id"]) < 2**64
    assert crypto["owner"] == crypto["registry"]["owner"] == owner.address
    assert crypto["metadata"]["main"]["name"] == "Starter"
    assert crypto["metadata"]["main"]["price"] == "1 USDC"
    assert crypto["metadata"]["plan"]["accessLimit"] == "credits"
    assert "fiatPaymentProvider" not in crypto["metadata"]["plan"]
    assert crypto["registry"]["price"]["isCrypto"] is True
    assert crypto["ordersCount"] == 0
    fiat_id = await api.plan(owner, fiat=True, price=2_000_000, duration=3600, credits=1)
    fiat = (await api.http.get(f"/protocol/plans/{fiat_id}")).json()
    assert fiat["metadata"]["main"]["price"] == "$2.00"
    assert fiat["metadata"]["plan"]["fiatPaymentProvider"] == "stripe"
    assert fiat["metadata"]["plan"]["accessLimit"] == "time"
    assert fiat["registry"]["price"]["isCrypto"] is False
    assert (await api.http.get("/protocol/plans/999")).status_code == 404


async def test_list_my_plans_pages_sorts_and_hides_others(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    for name in ("Bravo", "alpha", "Charlie"):
        await api.plan(owner, name=name)
    await api.plan(buyer, name="Not mine")
    answer = await api.http.get(
        "/protocol/plans",
        params={"page": 1, "offset": 2, "sortBy": "name", "sortOrder": "asc"},
        headers=owner.headers,
    )
    data = answer.json()
    assert data["total"] == 3 and data["page"] == 1 and data["offset"] == 2
    assert [p["metadata"]["main"]["name"] for p in data["plans"]] == ["alpha", "Bravo"]
    second = await api.http.get(
        "/protocol/plans",
        params={"page": 2, "offset": 2, "sortBy": "name", "sortOrder": "asc"},
        headers=owner.headers,
    )
    assert [p["metadata"]["main"]["name"] for p in second.json()["plans"]] == ["Charlie"]
    newest = await api.http.get("/protocol/plans", headers=owner.headers)
    assert newest.json()["plans"][0]["metadata"]["main"]["name"] == "Charlie"
    for bad in (
        {"page": "0"},
        {"offset": "101"},
        {"sortBy": "price"},
        {"sortOrder": "up"},
        {"page": "x"},
    ):
        rejected = await api.http.get("/protocol/plans", params=bad, headers=owner.headers)
        assert rejected.status_code == 400 and rejected.json()["code"] == "BCK.COMMON.0003"


async def test_credits_plan_order_grants_credits(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await api.plan(owner, credits=25)
    assert (await api.balance(plan_id, buyer))["isSubscriber"] is False
    answer = await api.order(buyer, plan_id)
    assert answer.status_code == 200
    assert answer.json()["success"] is True
    assert answer.json()["txHash"].startswith("0x") and len(answer.json()["txHash"]) == 66
    balance = await api.balance(plan_id, buyer)
    assert balance["balance"] == "25" and balance["isSubscriber"] is True
    assert balance["planType"] == "credits" and balance["holderAddress"] == buyer.address
    assert balance["pricePerCredit"] == pytest.approx(0.04)
    await api.order(buyer, plan_id)
    assert await api.credits(plan_id, buyer) == 50
    assert (await api.http.get(f"/protocol/plans/{plan_id}")).json()["ordersCount"] == 2


async def test_time_plan_gives_access_until_the_duration_ends(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner, duration=3600, credits=1)
    await api.order(buyer, plan_id)
    balance = await api.balance(plan_id, buyer)
    assert balance["planType"] == "time" and balance["balance"] == "1" and balance["isSubscriber"]
    clock.advance(3599)
    assert await api.credits(plan_id, buyer) == 1
    clock.advance(2)
    expired = await api.balance(plan_id, buyer)
    assert expired["balance"] == "0" and expired["isSubscriber"] is False


@pytest.mark.parametrize("duration", [0, 600])
async def test_trial_plans_sell_once_per_user(
    api: Api, owner: Actor, buyer: Actor, duration: int
) -> None:
    plan_id = await api.plan(owner, trial=True, price=0, duration=duration, credits=3)
    assert (await api.order(buyer, plan_id)).status_code == 200
    again = await api.order(buyer, plan_id)
    assert again.status_code == 409 and again.json()["code"] == "BCK.PROTOCOL.0048"
    other = await api.account("other")
    assert (await api.order(other, plan_id)).status_code == 200
    plan = (await api.http.get(f"/protocol/plans/{plan_id}")).json()
    assert plan["metadata"]["plan"]["isTrialPlan"] is True


async def test_max_orders_caps_the_number_of_orders(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await api.plan(owner, max_orders=2)
    assert (await api.order(buyer, plan_id)).status_code == 200
    assert (await api.order(owner, plan_id)).status_code == 200
    third = await api.order(buyer, plan_id)
    assert third.status_code == 409 and third.json()["code"] == "BCK.PROTOCOL.0049"
    assert await api.credits(plan_id, buyer) == 100
    plan = (await api.http.get(f"/protocol/plans/{plan_id}")).json()
    assert plan["metadata"]["plan"]["maxOrders"] == "2" and plan["ordersCount"] == 2


async def test_mint_is_owner_only(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await api.plan(owner)
    body = {"planId": plan_id, "amount": 7, "creditsReceiver": buyer.address}  # the SDK's body
    stolen = await api.http.post("/protocol/plans/mint", json=body, headers=buyer.headers)
    assert stolen.status_code == 403 and stolen.json()["code"] == "BCK.PROTOCOL.0003"
    assert await api.credits(plan_id, buyer) == 0
    minted = await api.http.post("/protocol/plans/mint", json=body, headers=owner.headers)
    assert minted.status_code == 200 and minted.json()["success"] is True
    assert minted.json()["txHash"].startswith("0x")
    assert await api.credits(plan_id, buyer) == 7
    for bad in (
        {**body, "amount": "0"},
        {**body, "creditsReceiver": "bob"},
        {"amount": "3", "creditsReceiver": buyer.address},
    ):
        rejected = await api.http.post("/protocol/plans/mint", json=bad, headers=owner.headers)
        assert rejected.status_code == 400, bad
    unknown = await api.http.post(
        "/protocol/plans/mint", json={**body, "planId": "42"}, headers=owner.headers
    )
    assert unknown.status_code == 404
    invented = await api.http.post(f"/protocol/plans/{plan_id}/mint", json=body)
    assert invented.status_code in (404, 405)  # the old per-plan route is not the service's


async def test_mint_expirable_credits_expire(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner)
    await api.http.post(
        "/protocol/plans/mint",
        json={"planId": plan_id, "amount": 5, "creditsReceiver": buyer.address},
        headers=owner.headers,
    )
    answer = await api.http.post(
        "/protocol/plans/mintExpirable",
        json={
            "planId": plan_id,
            "creditsAmount": 10,
            "creditsReceiver": buyer.address,
            "creditsDuration": 100,
        },
        headers=owner.headers,
    )
    assert answer.status_code == 200, answer.text
    assert await api.credits(plan_id, buyer) == 15
    clock.advance(101)
    assert await api.credits(plan_id, buyer) == 5
    ledger = await api.ledger(plan_id, buyer)
    assert (ledger["granted"], ledger["expired"]) == (15, 10)
    assert ledger["granted"] == ledger["balance"] + ledger["burned"] + ledger["expired"]


async def test_burns_spend_the_soonest_expiring_credits_first(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner)

    async def mint(amount: int, duration: int) -> None:
        body = {
            "planId": plan_id,
            "creditsAmount": amount,
            "creditsReceiver": buyer.address,
            "creditsDuration": duration,
        }
        answer = await api.http.post(
            "/protocol/plans/mintExpirable", json=body, headers=owner.headers
        )
        assert answer.status_code == 200, answer.text

    await mint(4, 0)  # duration 0: never expires
    await mint(3, 500)
    await mint(2, 100)
    assert await api.credits(plan_id, buyer) == 9

    async def burn(amount: int) -> int:
        body = {"planId": plan_id, "creditsAmount": str(amount)}
        answer = await api.http.post("/protocol/plans/burn", json=body, headers=buyer.headers)
        return answer.status_code

    assert await burn(3) == 200  # the 2 expiring at +100, then 1 of the 3 expiring at +500
    clock.advance(101)
    assert await api.credits(plan_id, buyer) == 6  # nothing was lost to the first expiry
    clock.advance(400)
    assert await api.credits(plan_id, buyer) == 4  # the 2 left of the +500 grant expired
    assert await burn(5) == 400  # more than the balance: refused, nothing burned
    assert await burn(4) == 200
    ledger = await api.ledger(plan_id, buyer)
    assert ledger == {
        "granted": 9,
        "burned": 7,
        "expired": 2,
        "balance": 0,
        "auditGranted": 9,
        "auditBurned": 7,
    }


async def test_redeem_burns_a_holders_credits_once_per_request(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=10)
    assert (await api.order(buyer, plan_id)).status_code == 200
    body = {
        "agentRequestId": "req-1",
        "planId": plan_id,
        "redeemFrom": buyer.address,
        "amount": "3",
    }
    stolen = await api.http.post("/protocol/plans/redeem", json=body, headers=buyer.headers)
    assert stolen.status_code == 403
    first = await api.http.post("/protocol/plans/redeem", json=body, headers=owner.headers)
    again = await api.http.post("/protocol/plans/redeem", json=body, headers=owner.headers)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() and first.json()["success"] is True
    assert await api.credits(plan_id, buyer) == 7  # the replay burned nothing
    other = await api.http.post(
        "/protocol/plans/redeem",
        json={**body, "agentRequestId": "req-2", "amount": "8"},
        headers=owner.headers,
    )
    assert other.status_code == 400 and "Insufficient credits" in other.json()["message"]
    assert await api.credits(plan_id, buyer) == 7


async def test_balance_rejects_bad_address_and_unknown_plan(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner)
    bad = await api.http.get(f"/protocol/plans/{plan_id}/balance/not-an-address")
    assert bad.status_code == 400
    unknown = await api.http.get(f"/protocol/plans/42/balance/{buyer.address}")
    assert unknown.status_code == 404 and unknown.json()["code"] == "BCK.PROTOCOL.0001"


async def test_durations_up_to_uint256_are_stored_exactly_and_never_lapse(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    """Both SDKs send a random 128-bit durationSecs to make a plan unique; uint256 is the
    service's type, so the largest one is kept to the digit."""
    biggest = 2**256 - 1
    for duration in (2**128 + 12345, biggest):
        plan_id = await api.plan(owner, duration=duration)
        plan = (await api.http.get(f"/protocol/plans/{plan_id}")).json()
        assert plan["registry"]["credits"]["durationSecs"] == str(duration)
        assert (await api.order(buyer, plan_id)).status_code == 200
        clock.advance(10 * 365 * 86400)
        assert (await api.balance(plan_id, buyer))["isSubscriber"] is True
    too_big = plan_body(owner, duration=0)
    too_big["creditsConfig"]["durationSecs"] = str(biggest + 1)
    refused = await api.http.post("/protocol/plans", json=too_big, headers=owner.headers)
    assert refused.status_code == 400 and "durationSecs" in refused.json()["message"]
    credits_plan = await api.plan(owner, credits=5)
    mint = {
        "planId": credits_plan,
        "creditsAmount": "3",
        "creditsReceiver": buyer.address,
        "creditsDuration": str(biggest),
    }
    minted = await api.http.post("/protocol/plans/mintExpirable", json=mint, headers=owner.headers)
    assert minted.status_code == 200, minted.text
    assert await api.credits(credits_plan, buyer) == 3
