"""Verify (reserve, burn nothing) and settle (burn once, idempotent) under concurrency."""

from __future__ import annotations

import asyncio
import base64
import json

from .support import CARD, REQUEST_TTL, Actor, Api, FakeClock, envelope


async def funded(api: Api, owner: Actor, buyer: Actor, credits: int, **plan: object) -> str:
    plan_id = await api.plan(owner, credits=credits, **plan)
    assert (await api.order(buyer, plan_id)).status_code == 200
    return plan_id


async def test_verify_approves_reserves_and_burns_nothing(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 3)
    token = await api.token(buyer, plan_id)
    result = await api.verify(owner, token, plan_id)
    assert result["isValid"] is True
    assert result["payer"] == buyer.address and result["network"] == "eip155:84532"
    request = result["agentRequest"]
    assert request["agentRequestId"] == result["agentRequestId"]
    assert request["balance"]["balance"] == "3"
    assert await api.credits(plan_id, buyer) == 3  # the shown balance ignores holds
    assert (await api.ledger(plan_id, buyer))["held"] == 1
    # a base64 envelope works too, and any valid key may verify (here the subscriber's)
    encoded = base64.b64encode(json.dumps(envelope(plan_id)).encode()).decode()
    again = await api.http.post(
        "/x402/verify",
        json={"paymentRequired": encoded, "x402AccessToken": token, "maxAmount": "1"},
        headers=buyer.headers,
    )
    assert again.status_code == 200 and again.json()["isValid"] is True
    assert await api.credits(plan_id, buyer) == 3


async def test_verify_reasons(api: Api, owner: Actor, buyer: Actor, clock: FakeClock) -> None:
    plan_id = await funded(api, owner, buyer, 5, low=2, high=4)
    other_plan = await api.plan(owner)
    agent_id = await api.agent(owner, [plan_id])
    token = await api.token(buyer, plan_id)
    cases = {
        "other plan": (envelope(other_plan), "2", "no accepts entry"),
        "card scheme": (envelope(plan_id, CARD), "2", "no accepts entry"),
        "agent mismatch": (envelope(plan_id, agent_id=agent_id), "2", "different agent"),
        "below min": (envelope(plan_id), "1", "outside the plan's range"),
        "above max": (envelope(plan_id), "5", "outside the plan's range"),
        "too many": (envelope(plan_id), "4", None),
    }
    for name, (paid, amount, reason) in cases.items():
        result = await api.verify(owner, token, plan_id, amount, paid)
        if reason is None:
            assert result["isValid"] is True, name
        else:
            assert result["isValid"] is False, name
            assert reason in result["invalidReason"], (name, result["invalidReason"])
    short = await api.verify(owner, token, plan_id, "2")  # 5 - 4 held = 1 left
    assert short["isValid"] is False and "insufficient credits" in short["invalidReason"]
    clock.advance(3601)
    late = await api.verify(owner, token, plan_id, "2")
    assert late["isValid"] is False and "expired" in late["invalidReason"]


async def test_verify_enforces_the_agent_endpoint_allow_list(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 10)
    agent_id = await api.agent(
        owner, [plan_id], endpoints=[{"POST": "http://127.0.0.1:8402/svc/agent/:task"}]
    )
    token = await api.token(buyer, plan_id, agent_id=agent_id)

    def paid(url: str, verb: str = "POST") -> dict[str, object]:
        return envelope(plan_id, agent_id=agent_id, url=url, verb=verb)

    ok = await api.verify(owner, token, plan_id, paid=paid("http://127.0.0.1:8402/svc/agent/x"))
    assert ok["isValid"] is True
    assert ok["agentRequest"]["agentId"] == agent_id and ok["agentRequest"]["agentName"] == "Agent"
    assert ok["agentRequest"]["verbMatching"] == "POST"
    relative = await api.verify(owner, token, plan_id, paid=paid("/svc/agent/y"))
    assert relative["isValid"] is True
    for url, verb in (
        ("http://127.0.0.1:8402/other", "POST"),
        ("", "POST"),
        ("http://127.0.0.1:8402/svc/agent/x", "GET"),
    ):
        refused = await api.verify(owner, token, plan_id, paid=paid(url, verb))
        assert refused["isValid"] is False and "endpoint" in refused["invalidReason"]


async def test_malformed_verify_bodies_are_400(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await funded(api, owner, buyer, 1)
    token = await api.token(buyer, plan_id)
    good = {"paymentRequired": envelope(plan_id), "x402AccessToken": token, "maxAmount": "1"}
    for field, value in (
        ("paymentRequired", "bm90IGpzb24="),
        ("paymentRequired", {"accepts": "x"}),
        ("x402AccessToken", 12),
        ("maxAmount", "one"),
        ("maxAmount", -1),
        ("maxAmount", None),
    ):
        body = {**good, field: value}
        answer = await api.http.post("/x402/verify", json=body, headers=owner.headers)
        assert answer.status_code == 400, (field, value)
    assert (await api.http.post("/x402/verify", json=good)).status_code == 401


async def test_concurrent_verifies_never_approve_more_than_the_balance(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 5)
    token = await api.token(buyer, plan_id)
    results = await asyncio.gather(*(api.verify(owner, token, plan_id) for _ in range(20)))
    assert sum(r["isValid"] for r in results) == 5
    assert await api.credits(plan_id, buyer) == 5


async def test_settle_is_idempotent_under_concurrent_replays(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 10, low=1, high=3)
    token = await api.token(buyer, plan_id)
    request_id = (await api.verify(owner, token, plan_id, "3"))["agentRequestId"]
    answers = await asyncio.gather(
        *(api.settle_answer(owner, token, plan_id, request_id, "3") for _ in range(50))
    )
    assert {a.status_code for a in answers} == {200}
    bodies = [a.json() for a in answers]
    assert all(b == bodies[0] for b in bodies)
    first = bodies[0]
    assert first["success"] is True and first["creditsRedeemed"] == "3"
    assert first["remainingBalance"] == "7" and first["transaction"].startswith("0x")
    assert first["payer"] == buyer.address
    assert await api.credits(plan_id, buyer) == 7
    ledger = await api.ledger(plan_id, buyer)
    assert ledger == {"granted": 10, "burned": 3, "held": 0, "balance": 7, "expired": 0}


async def test_settle_errors(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await funded(api, owner, buyer, 10, low=1, high=5)
    token = await api.token(buyer, plan_id)
    other_token = await api.token(buyer, plan_id)
    request_id = (await api.verify(owner, token, plan_id, "2"))["agentRequestId"]
    not_owner = await api.settle_answer(buyer, token, plan_id, request_id, "2")
    assert not_owner.status_code == 403
    unknown = await api.settle_answer(owner, token, plan_id, "no-such-request", "2")
    assert unknown.status_code == 404
    mismatch = await api.settle_answer(owner, other_token, plan_id, request_id, "2")
    assert mismatch.status_code == 400 and mismatch.json()["code"] == "BCK.X402.0041"
    too_much = await api.settle_answer(owner, token, plan_id, request_id, "3")
    assert too_much.status_code == 400 and too_much.json()["code"] == "BCK.X402.0042"
    assert await api.credits(plan_id, buyer) == 10
    less = await api.settle_answer(owner, token, plan_id, request_id, "1")
    assert less.json()["success"] is True and less.json()["creditsRedeemed"] == "1"
    assert await api.credits(plan_id, buyer) == 9


async def test_hold_expiry(api: Api, owner: Actor, buyer: Actor, clock: FakeClock) -> None:
    plan_id = await funded(api, owner, buyer, 1)
    token = await api.token(buyer, plan_id)
    request_id = (await api.verify(owner, token, plan_id))["agentRequestId"]
    assert (await api.verify(owner, token, plan_id))["isValid"] is False  # the hold reserves it
    clock.advance(REQUEST_TTL + 1)
    late = await api.settle_answer(owner, token, plan_id, request_id)
    assert late.status_code == 200
    assert late.json() == {
        "success": False,
        "errorReason": "hold expired",
        "transaction": "",
        "payer": buyer.address,
    }
    assert await api.credits(plan_id, buyer) == 1
    fresh = await api.verify(owner, token, plan_id)  # the expired hold frees the credit
    assert fresh["isValid"] is True


async def test_settle_without_request_id_verifies_and_burns(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 2)
    token = await api.token(buyer, plan_id)
    for expected in ("1", "0"):
        answer = (await api.settle_answer(owner, token, plan_id, None)).json()
        assert answer["success"] is True and answer["remainingBalance"] == expected
    empty = (await api.settle_answer(owner, token, plan_id, None)).json()
    assert empty["success"] is False and "insufficient" in empty["errorReason"]
    assert empty["transaction"] == ""


async def test_time_plan_settles_for_zero_while_access_lasts(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await funded(api, owner, buyer, 1, duration=600)
    token = await api.token(buyer, plan_id)
    for _ in range(3):
        request_id = (await api.verify(owner, token, plan_id))["agentRequestId"]
        settled = (await api.settle_answer(owner, token, plan_id, request_id)).json()
        assert settled["success"] is True and settled["creditsRedeemed"] == "0"
        assert settled["remainingBalance"] == "1"
    clock.advance(601)
    result = await api.verify(owner, token, plan_id)
    assert result["isValid"] is False and "time plan" in result["invalidReason"]


async def test_fiat_plan_pays_with_a_card_delegation(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await api.plan(owner, fiat=True, price=2_000_000, credits=4)
    await api.http.post(
        f"/protocol/plans/{plan_id}/mint",
        json={"amount": "4", "receiver": buyer.address},
        headers=owner.headers,
    )
    token = await api.token(buyer, plan_id, scheme=CARD)
    paid = envelope(plan_id, CARD)
    result = await api.verify(owner, token, plan_id, paid=paid)
    assert result["isValid"] is True and result["network"] == "stripe"
    settled = await api.settle_answer(owner, token, plan_id, result["agentRequestId"], paid=paid)
    assert settled.json()["success"] is True and settled.json()["remainingBalance"] == "3"


async def test_conservation_after_a_mixed_run(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await funded(api, owner, buyer, 8, low=1, high=2)
    await api.http.post(
        f"/protocol/plans/{plan_id}/mint",
        json={"amount": "4", "receiver": buyer.address},
        headers=owner.headers,
    )
    token = await api.token(buyer, plan_id)
    verified = await asyncio.gather(*(api.verify(owner, token, plan_id, "2") for _ in range(8)))
    ids = [v["agentRequestId"] for v in verified if v["isValid"]]
    assert len(ids) == 6  # 12 credits, 2 reserved each
    settles = [api.settle_answer(owner, token, plan_id, rid, "2") for rid in ids[:3] * 4]
    settles.append(api.settle_answer(owner, token, plan_id, ids[3], "1"))
    await asyncio.gather(*settles)
    clock.advance(REQUEST_TTL + 1)  # ids[4:] are never settled
    expired = await api.settle_answer(owner, token, plan_id, ids[4], "2")
    assert expired.json()["success"] is False
    extra = await api.settle_answer(owner, token, plan_id, None, "2")
    assert extra.json()["success"] is True
    await api.order(buyer, plan_id)
    ledger = await api.ledger(plan_id, buyer)
    assert ledger["granted"] == 8 + 4 + 8
    assert ledger["burned"] == 3 * 2 + 1 + 2
    assert ledger["granted"] == ledger["balance"] + ledger["burned"]
    assert await api.credits(plan_id, buyer) == ledger["balance"] == 11
