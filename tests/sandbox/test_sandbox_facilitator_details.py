"""What a seller reads when settle refuses: the code, the reason and the next step."""

from __future__ import annotations

from .support import NO_TOPUP, Actor, Api, FakeClock, envelope
from .test_sandbox_facilitator import funded
from .test_sandbox_tokens_v3 import URL, seller, token_v3


async def test_settle_refusals_tell_the_seller_what_to_send(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 10)
    token = await api.token(buyer, plan_id)
    other_token = await api.token(buyer, plan_id)
    request_id = (await api.verify(owner, token, plan_id))["agentRequestId"]
    stranger = await api.settle_answer(buyer, token, plan_id, request_id)
    assert stranger.status_code == 403
    assert "only the plan owner settles its requests" in stranger.json()["message"]
    unknown = await api.settle_answer(owner, token, plan_id, "no-such-request")
    assert unknown.status_code == 404
    assert unknown.json()["code"] == "BCK.X402.0040"
    assert unknown.json()["message"] == "Unknown agentRequestId"
    assert unknown.json()["hint"] == "Send the agentRequestId that verify returned"
    mismatch = await api.settle_answer(owner, other_token, plan_id, request_id)
    assert mismatch.status_code == 400
    assert "verified for a different token or plan" in mismatch.json()["message"]
    assert await api.credits(plan_id, buyer) == 10


async def test_a_settle_counts_one_transaction_on_the_tokens_delegation(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 10)
    delegation_id = await api.delegation(buyer)
    minted = await api.token_answer(buyer, plan_id, delegation_id)
    token = minted.json()["accessToken"]
    for left in ("9", "8"):
        settled = (await api.settle_answer(owner, token, plan_id, None)).json()
        assert settled["success"] is True and settled["remainingBalance"] == left
        assert settled["network"] == "eip155:84532" and settled["payer"] == buyer.address
    listed = (await api.http.get("/delegation", headers=buyer.headers)).json()
    counts = {d["delegationId"]: d["transactionCount"] for d in listed}
    assert counts[delegation_id] == 2


async def test_settle_of_an_unreadable_token_gives_the_same_reason_as_verify(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 3)
    token = await api.token(buyer, plan_id)
    forged = token[:-6] + ("A" * 6 if not token.endswith("AAAAAA") else "B" * 6)
    verified = await api.verify(owner, forged, plan_id)
    assert verified == {
        "isValid": False,
        "invalidReason": "invalid access token: signature check failed",
    }
    settled = (await api.settle_answer(owner, forged, plan_id, None)).json()
    assert settled == {
        "success": False,
        "errorReason": verified["invalidReason"],
        "transaction": "",
    }
    assert await api.credits(plan_id, buyer) == 3


async def test_refused_settles_name_the_payer_and_a_spent_v3_token_says_withhold(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id, agent_id = await seller(api, owner, buyer)
    paid = envelope(plan_id, agent_id=agent_id, url=URL, verb="POST")
    token = await token_v3(api, buyer, plan_id, agent_id)
    elsewhere = envelope(plan_id, agent_id="did:svc:someone-else", url=URL, verb="POST")
    refused = await api.verify(owner, token, plan_id, "1", paid=elsewhere)
    assert refused["isValid"] is False and refused["payer"] == buyer.address
    beyond = (await api.settle_answer(owner, token, plan_id, None, paid=elsewhere)).json()
    assert beyond["success"] is False and beyond["payer"] == buyer.address
    assert "issued for a different agent" in beyond["errorReason"]
    first = await api.settle_answer(owner, token, plan_id, None, paid=paid)
    assert first.json()["success"] is True
    replay = await api.settle_answer(owner, token, plan_id, None, paid=paid)
    assert replay.status_code == 403
    assert "already settled (version 3 tokens are single use)" in replay.json()["message"]
    assert replay.json()["message"].endswith("mint a new token")  # what the TS e2e suite reads
    assert replay.json()["hint"] == "Withhold the answer; the buyer must mint a new token"
    assert await api.credits(plan_id, buyer) == 9


async def test_verify_reasons_are_exact_and_a_token_lapses_at_its_expiry(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await funded(api, owner, buyer, 5)
    agent_id = await api.agent(owner, [plan_id])
    other_agent = await api.agent(owner, [plan_id])
    token = await api.token(buyer, plan_id, agent_id=agent_id)
    blank_agent = envelope(plan_id)
    blank_agent["accepts"][0]["extra"] = {"agentId": ""}
    odd_extra = envelope(plan_id)
    odd_extra["accepts"][0]["extra"] = "not an object"
    for paid in (blank_agent, odd_extra):  # no agent named: any agent's token pays
        assert (await api.verify(owner, token, plan_id, paid=paid))["isValid"] is True
    wrong = await api.verify(owner, token, plan_id, paid=envelope(plan_id, agent_id=other_agent))
    assert wrong["invalidReason"] == "the access token was issued for a different agent"
    delegation_id = await api.delegation(buyer, duration=30)
    short = (await api.token_answer(buyer, plan_id, delegation_id)).json()["accessToken"]
    clock.advance(29)
    assert (await api.verify(owner, short, plan_id))["isValid"] is True
    clock.advance(1)  # the token's expiry: the delegation's end, to the second
    lapsed = await api.verify(owner, short, plan_id)
    assert lapsed["isValid"] is False and lapsed["invalidReason"] == "access token expired"
    dropped = await api.http.delete(
        f"/protocol/agents/{agent_id}/plan/{plan_id}", headers=owner.headers
    )
    assert dropped.status_code == 200
    gone = await api.verify(owner, token, plan_id)
    assert gone["invalidReason"] == "the token's agent no longer sells this plan"


async def test_time_plan_without_access_says_order_it_first(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner, duration=600)
    assert (await api.order(buyer, plan_id)).status_code == 200
    token = await api.token(buyer, plan_id, limit=NO_TOPUP)
    clock.advance(601)
    late = await api.verify(owner, token, plan_id, "1")
    assert late["invalidReason"] == (
        "no active access to this time plan, and the plan cannot be ordered for it: "
        "the plan costs 100 cents and the delegation has 99 of its 99 cents left"
    )


async def test_malformed_payment_bodies_say_which_field_and_limits_are_inclusive(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 5)
    token = await api.token(buyer, plan_id)
    base = {"paymentRequired": envelope(plan_id), "x402AccessToken": token, "maxAmount": "1"}

    async def post(**changes: object) -> dict[str, object]:
        answer = await api.http.post(
            "/x402/verify", json={**base, **changes}, headers=owner.headers
        )
        data: dict[str, object] = answer.json()
        data["status"] = answer.status_code
        return data

    no_envelope = await post(paymentRequired={"x402Version": 2})
    assert no_envelope["status"] == 400 and no_envelope["code"] == "BCK.X402.0002"
    assert no_envelope["message"] == (
        "paymentRequired must be an x402 PaymentRequired envelope with an accepts list "
        "(a JSON object or its base64 encoding)"
    )
    for bad_token in ("   ", "x" * 16385):
        refused = await post(x402AccessToken=bad_token)
        assert refused["status"] == 400
        assert refused["message"] == "x402AccessToken must be the access token string"
    longest = await post(x402AccessToken="x" * 16384)  # read, then refused as unreadable
    assert longest["status"] == 200 and longest["isValid"] is False
    assert (await post(agentRequestId="r" * 201))["status"] == 400
    assert (await post(agentRequestId="r" * 200))["status"] == 200
    fiat = await api.plan(owner, fiat=True, price=2_000_000)
    card_only = await api.order(buyer, fiat)
    assert card_only.status_code == 400
    assert (
        card_only.json()["message"] == "This plan is paid by card and cannot be ordered with crypto"
    )
    assert "POST /fiat/stripe/payment, svc_orderFiatPlan" in card_only.json()["hint"]
