"""Verify (a dry run: reserves and burns nothing) and settle (re-checks, burns once,
idempotent on agentRequestId) under concurrency."""

from __future__ import annotations

import asyncio
import base64
import json

from .support import CARD, NO_TOPUP, REQUEST_TTL, Actor, Api, FakeClock, envelope


async def funded(api: Api, owner: Actor, buyer: Actor, credits: int, **plan: object) -> str:
    plan_id = await api.plan(owner, credits=credits, **plan)
    assert (await api.order(buyer, plan_id)).status_code == 200
    return plan_id


async def mint(api: Api, owner: Actor, plan_id: str, receiver: Actor, amount: int) -> None:
    body = {"planId": plan_id, "amount": amount, "creditsReceiver": receiver.address}
    answer = await api.http.post("/protocol/plans/mint", json=body, headers=owner.headers)
    assert answer.status_code == 200, answer.text


async def test_verify_is_a_repeatable_dry_run(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await funded(api, owner, buyer, 1)
    token = await api.token(buyer, plan_id)
    results = await asyncio.gather(*(api.verify(owner, token, plan_id) for _ in range(10)))
    assert all(r["isValid"] for r in results)  # nothing reserved: all ten pass on 1 credit
    assert len({r["agentRequestId"] for r in results}) == 10
    first = results[0]
    assert first["payer"] == buyer.address and first["network"] == "eip155:84532"
    assert first["agentRequest"]["agentRequestId"] == first["agentRequestId"]
    assert first["agentRequest"]["balance"]["balance"] == "1"
    assert await api.credits(plan_id, buyer) == 1
    assert (await api.ledger(plan_id, buyer))["burned"] == 0
    # a base64 envelope works too, and any valid key may verify (here the subscriber's)
    encoded = base64.b64encode(json.dumps(envelope(plan_id)).encode()).decode()
    again = await api.http.post(
        "/x402/verify",
        json={"paymentRequired": encoded, "x402AccessToken": token, "maxAmount": "1"},
        headers=buyer.headers,
    )
    assert again.status_code == 200 and again.json()["isValid"] is True
    assert await api.credits(plan_id, buyer) == 1


async def test_max_amount_is_optional_and_defaults_to_credits_per_request(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 5, low=2, high=4)
    token = await api.token(buyer, plan_id)
    body = {"paymentRequired": envelope(plan_id), "x402AccessToken": token}
    verified = await api.http.post("/x402/verify", json=body, headers=owner.headers)
    assert verified.status_code == 200 and verified.json()["isValid"] is True
    request_id = verified.json()["agentRequestId"]
    settled = await api.http.post(
        "/x402/settle", json={**body, "agentRequestId": request_id}, headers=owner.headers
    )
    assert settled.status_code == 200, settled.text
    assert settled.json()["creditsRedeemed"] == "4"  # the plan's default: its maxAmount
    assert await api.credits(plan_id, buyer) == 1


async def test_verify_reasons(api: Api, owner: Actor, buyer: Actor, clock: FakeClock) -> None:
    plan_id = await funded(api, owner, buyer, 3, low=2, high=4)
    other_plan = await api.plan(owner)
    agent_id = await api.agent(owner, [plan_id])
    token = await api.token(buyer, plan_id, limit=NO_TOPUP)
    cases = {
        "other plan": (envelope(other_plan), "2", "no accepts entry"),
        "card scheme": (envelope(plan_id, CARD), "2", "no accepts entry"),
        "agent mismatch": (envelope(plan_id, agent_id=agent_id), "2", "different agent"),
        "more than the balance": (envelope(plan_id), "4", "insufficient credits: 3 available"),
        "within the balance": (envelope(plan_id), "3", None),
    }
    for name, (paid, amount, reason) in cases.items():
        result = await api.verify(owner, token, plan_id, amount, paid)
        if reason is None:
            assert result["isValid"] is True, name
        else:
            assert result["isValid"] is False, name
            assert reason in result["invalidReason"], (name, result["invalidReason"])
    clock.advance(3601)
    late = await api.verify(owner, token, plan_id, "2")
    assert late["isValid"] is False and "expired" in late["invalidReason"]


async def test_a_token_with_a_resource_url_arms_the_endpoint_allow_list(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 10)
    pattern = "http://127.0.0.1:8402/svc/agent/:task"
    agent_id = await api.agent(owner, [plan_id], endpoints=[{"POST": pattern}])
    token = await api.token(
        buyer, plan_id, agent_id=agent_id, resource="http://127.0.0.1:8402/svc/agent/x"
    )

    def paid(url: str, verb: str = "POST") -> dict[str, object]:
        return envelope(plan_id, agent_id=agent_id, url=url, verb=verb)

    ok = await api.verify(owner, token, plan_id, paid=paid("http://127.0.0.1:8402/svc/agent/x"))
    assert ok["isValid"] is True
    assert ok["agentRequest"]["agentId"] == agent_id and ok["agentRequest"]["agentName"] == "Agent"
    assert ok["agentRequest"]["verbMatching"] == "POST"
    assert ok["urlMatching"] == pattern
    relative = await api.verify(owner, token, plan_id, paid=paid("/svc/agent/y"))
    assert relative["isValid"] is True
    no_url = await api.verify(owner, token, plan_id, paid=paid(""))  # the token's URL is checked
    assert no_url["isValid"] is True and no_url["urlMatching"] == pattern
    for url, verb in (
        ("http://127.0.0.1:8402/other", "POST"),
        ("http://127.0.0.1:8402/svc/agent/x", "GET"),
    ):
        body = {"paymentRequired": paid(url, verb), "x402AccessToken": token, "maxAmount": "1"}
        refused = await api.http.post("/x402/verify", json=body, headers=owner.headers)
        assert refused.status_code == 400, (url, verb)
        assert refused.json()["code"] == "BCK.PROTOCOL.0031"
        unpaid = await api.http.post("/x402/settle", json=body, headers=owner.headers)
        assert unpaid.status_code == 400 and unpaid.json()["code"] == "BCK.PROTOCOL.0031"
    assert await api.credits(plan_id, buyer) == 10
    outside = await api.token_answer(
        buyer,
        plan_id,
        await api.delegation(buyer),
        agent_id=agent_id,
        resource="http://127.0.0.1:8402/other",
    )
    assert outside.status_code == 400 and outside.json()["code"] == "BCK.PROTOCOL.0031"


async def test_a_v2_token_without_resource_url_skips_the_allow_list(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    """As on the service: only a token's own resource.url switches the allow-list on."""
    plan_id = await funded(api, owner, buyer, 10)
    pattern = "http://127.0.0.1:8402/svc/agent"
    agent_id = await api.agent(owner, [plan_id], endpoints=[{"POST": pattern}])
    token = await api.token(buyer, plan_id, agent_id=agent_id)
    elsewhere = envelope(plan_id, agent_id=agent_id, url="http://127.0.0.1:9/x", verb="POST")
    verified = await api.verify(owner, token, plan_id, paid=elsewhere)
    assert verified["isValid"] is True and verified["urlMatching"] is None
    matching = envelope(plan_id, agent_id=agent_id, url=pattern, verb="POST")
    assert (await api.verify(owner, token, plan_id, paid=matching))["urlMatching"] == pattern
    settled = await api.settle_answer(
        owner, token, plan_id, verified["agentRequestId"], paid=elsewhere
    )
    assert settled.json()["success"] is True and settled.json()["remainingBalance"] == "9"


async def test_verb_url_endpoint_items_never_match(api: Api, owner: Actor, buyer: Actor) -> None:
    """The service reads an item as ``{VERB: url}``; ``{verb, url}`` items match nothing."""
    plan_id = await funded(api, owner, buyer, 10)
    url = "http://127.0.0.1:8402/svc/agent"
    agent_id = await api.agent(owner, [plan_id], endpoints=[{"verb": "POST", "url": url}])
    delegation_id = await api.delegation(buyer)
    bound = await api.token_answer(buyer, plan_id, delegation_id, agent_id=agent_id, resource=url)
    assert bound.status_code == 400 and bound.json()["code"] == "BCK.PROTOCOL.0031"
    v3 = dict(
        accepted={
            "scheme": "svc:erc4337",
            "planId": plan_id,
            "extra": {"agentId": agent_id, "httpVerb": "POST"},
        },
        resource={"url": url},
        tokenVersion=3,
        delegationConfig={"delegationId": delegation_id},
    )
    refused = await api.http.post("/x402/permissions", json=v3, headers=buyer.headers)
    assert refused.status_code == 400 and refused.json()["code"] == "BCK.PROTOCOL.0031"
    assert await api.credits(plan_id, buyer) == 10


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
        ("agentRequestId", 7),
    ):
        body = {**good, field: value}
        answer = await api.http.post("/x402/verify", json=body, headers=owner.headers)
        assert answer.status_code == 400, (field, value)
        assert "Traceback" not in answer.text
    assert (await api.http.post("/x402/verify", json=good)).status_code == 401


async def test_concurrent_settles_never_spend_more_than_the_balance(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 5)
    token = await api.token(buyer, plan_id, limit=NO_TOPUP)
    verified = await asyncio.gather(*(api.verify(owner, token, plan_id) for _ in range(20)))
    assert all(v["isValid"] for v in verified)
    answers = await asyncio.gather(
        *(api.settle_answer(owner, token, plan_id, v["agentRequestId"]) for v in verified)
    )
    paid = [a.json() for a in answers if a.status_code == 200]
    assert len(paid) == 5 and all(b["success"] and "orderTx" not in b for b in paid)
    refused = [a.json() for a in answers if a.status_code != 200]
    assert len(refused) == 15 and {r["code"] for r in refused} == {"BCK.X402.0023"}
    assert all("insufficient credits: 0 available" in r["message"] for r in refused)
    ledger = await api.ledger(plan_id, buyer)
    assert (ledger["balance"], ledger["burned"]) == (0, 5)


async def test_settle_rechecks_the_balance_spent_since_verify(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 2, low=2, high=2)
    token = await api.token(buyer, plan_id, limit=NO_TOPUP)
    verified = await api.verify(owner, token, plan_id, "2")
    assert verified["isValid"] is True
    spent = await api.http.post(  # the buyer spends a credit between verify and settle
        "/protocol/plans/burn",
        json={"planId": plan_id, "creditsAmount": "1"},
        headers=buyer.headers,
    )
    assert spent.status_code == 200, spent.text
    late = await api.settle_answer(owner, token, plan_id, verified["agentRequestId"], "2")
    assert late.status_code == 403
    assert late.json()["code"] == "BCK.X402.0023"
    assert late.json()["message"] == (
        "Cannot order plan: the plan costs 100 cents and the delegation has 99 of its 99 cents "
        "left (insufficient credits: 1 available, 2 requested)"
    )
    assert await api.credits(plan_id, buyer) == 1


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
    assert ledger == {
        "granted": 10,
        "burned": 3,
        "balance": 7,
        "expired": 0,
        "auditGranted": 10,
        "auditBurned": 3,
    }


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
    less = await api.settle_answer(owner, token, plan_id, request_id, "1")
    assert less.json()["success"] is True and less.json()["creditsRedeemed"] == "1"
    assert await api.credits(plan_id, buyer) == 9


async def test_verified_request_expiry(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await funded(api, owner, buyer, 1)
    token = await api.token(buyer, plan_id)
    request_id = (await api.verify(owner, token, plan_id))["agentRequestId"]
    clock.advance(REQUEST_TTL + 1)
    late = await api.settle_answer(owner, token, plan_id, request_id)
    assert late.status_code == 200
    assert late.json() == {
        "success": False,
        "errorReason": "agent request expired: verify the token again",
        "transaction": "",
        "payer": buyer.address,
    }
    assert await api.credits(plan_id, buyer) == 1
    fresh = await api.verify(owner, token, plan_id)
    assert fresh["isValid"] is True


async def test_a_request_verified_in_time_settles_after_the_token_expires(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await funded(api, owner, buyer, 2)
    delegation_id = await api.delegation(buyer, duration=30)
    token = (await api.token_answer(buyer, plan_id, delegation_id)).json()["accessToken"]
    request_id = (await api.verify(owner, token, plan_id))["agentRequestId"]
    clock.advance(31)  # token and delegation expire while the agent works
    settled = (await api.settle_answer(owner, token, plan_id, request_id)).json()
    assert settled["success"] is True and settled["remainingBalance"] == "1"
    fresh = (await api.settle_answer(owner, token, plan_id, None)).json()
    assert fresh["success"] is False and "expired" in fresh["errorReason"]


async def test_settle_without_request_id_verifies_and_burns(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 2)
    token = await api.token(buyer, plan_id, limit=NO_TOPUP)
    for expected in ("1", "0"):
        answer = (await api.settle_answer(owner, token, plan_id, None)).json()
        assert answer["success"] is True and answer["remainingBalance"] == expected
    empty = await api.settle_answer(owner, token, plan_id, None)
    assert empty.status_code == 403 and "insufficient credits" in empty.json()["message"]
    assert (await api.ledger(plan_id, buyer))["burned"] == 2


async def test_time_plan_settles_for_zero_while_access_lasts(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await funded(api, owner, buyer, 1, duration=600)
    token = await api.token(buyer, plan_id, limit=NO_TOPUP)
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
    await mint(api, owner, plan_id, buyer, 4)
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
    await mint(api, owner, plan_id, buyer, 4)
    token = await api.token(buyer, plan_id)
    verified = await asyncio.gather(*(api.verify(owner, token, plan_id, "2") for _ in range(8)))
    ids = [v["agentRequestId"] for v in verified]
    assert len(ids) == 8  # verify reserves nothing
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
    assert ledger["granted"] == ledger["auditGranted"] == 8 + 4 + 8
    assert ledger["burned"] == ledger["auditBurned"] == 3 * 2 + 1 + 2
    assert ledger["granted"] == ledger["balance"] + ledger["burned"]
    assert await api.credits(plan_id, buyer) == ledger["balance"] == 11


async def test_an_amount_outside_the_plans_range_counts_as_its_minimum(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    """As the service documents for dynamic charges (facilitator module docstring): 7 on a
    [2, 4] plan and 1 below it both burn 2; "0" or no maxAmount burns the default, 4."""
    plan_id = await funded(api, owner, buyer, 20, low=2, high=4)
    token = await api.token(buyer, plan_id)
    for asked, burned in (("7", "2"), ("1", "2"), ("3", "3"), ("0", "4")):
        verified = await api.verify(owner, token, plan_id, asked)
        assert verified["isValid"] is True, asked
        settled = await api.settle_answer(owner, token, plan_id, verified["agentRequestId"], asked)
        assert settled.json()["creditsRedeemed"] == burned, asked
    assert await api.credits(plan_id, buyer) == 20 - 11
