"""x402 access tokens: the create-first delegation flow and the sealed token document."""

from __future__ import annotations

import base64
import json
from typing import Any

from payments_py.x402.token import decode_access_token as sdk_decode
from payments_py.x402.token import is_single_use_access_token

from svc_gateway.encoding import decode_access_token, token_authorization

from .support import CARD, CRYPTO, Actor, Api, FakeClock


async def test_token_payload_names_payer_plan_agent_and_delegation(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner)
    agent_id = await api.agent(owner, [plan_id])
    delegation_id = await api.delegation(buyer, duration=600)
    answer = await api.token_answer(buyer, plan_id, delegation_id, agent_id=agent_id)
    assert answer.status_code == 200, answer.text
    token = answer.json()["accessToken"]
    # The service's format: unpadded base64url of compact JSON, not a JWT.
    assert token.startswith("eyJ") and "." not in token and "=" not in token
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    decoded = sdk_decode(token)
    assert decoded is not None and decoded == decode_access_token(token)
    assert decoded["x402Version"] == 2 and decoded["extensions"] == {}
    assert decoded["accepted"] == {
        "scheme": CRYPTO,
        "network": "eip155:84532",
        "planId": plan_id,
        "extra": {"version": "1", "agentId": agent_id},
    }
    auth = token_authorization(decoded)
    assert auth["from"] == buyer.address
    assert auth["planId"] == plan_id and auth["agentId"] == agent_id
    assert auth["delegationId"] == delegation_id
    assert decoded["payload"]["signature"].startswith("0x")
    assert auth["validBefore"] == str(int(clock.now) + 600)  # capped by the delegation's expiry
    assert "nonce" not in auth and not is_single_use_access_token(token)  # v2 is the default


async def test_token_lifetime_is_at_most_an_hour(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner)
    token = await api.token(buyer, plan_id)
    decoded = sdk_decode(token)
    assert decoded is not None
    assert token_authorization(decoded)["validBefore"] == str(int(clock.now) + 3600)


async def test_token_requests_need_a_usable_delegation(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock
) -> None:
    plan_id = await api.plan(owner)
    missing = await api.token_answer(buyer, plan_id, None)
    assert missing.status_code == 400 and missing.json()["code"] == "BCK.X402.0030"
    blank = await api.token_answer(buyer, plan_id, "   ")
    assert blank.status_code == 400 and blank.json()["code"] == "BCK.X402.0030"
    unknown = await api.token_answer(buyer, plan_id, "6f1c0000-0000-4000-8000-000000000000")
    assert unknown.status_code == 404
    someone_elses = await api.delegation(owner)
    foreign = await api.token_answer(buyer, plan_id, someone_elses)
    assert foreign.status_code == 403
    short = await api.delegation(buyer, duration=10)
    clock.advance(11)
    expired = await api.token_answer(buyer, plan_id, short)
    assert expired.status_code == 403 and expired.json()["code"] == "BCK.X402.0013"


async def test_inline_delegation_fields_create_a_delegation_on_the_fly(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    """Deprecated but still accepted by the service (SPEC.md): no delegationId, inline limits."""
    plan_id = await api.plan(owner)
    body: dict[str, Any] = {
        "accepted": {"scheme": CRYPTO, "network": "eip155:84532", "planId": plan_id},
        "delegationConfig": {"spendingLimitCents": 1000, "durationSecs": 60, "currency": "usdc"},
    }
    answer = await api.http.post("/x402/permissions", json=body, headers=buyer.headers)
    assert answer.status_code == 200, answer.text
    decoded = sdk_decode(answer.json()["accessToken"])
    assert decoded is not None
    created = token_authorization(decoded)["delegationId"]
    listed = (await api.http.get("/delegation", headers=buyer.headers)).json()
    assert [(d["id"], d["spendingLimitCents"], d["durationSecs"]) for d in listed] == [
        (created, "1000", 60)
    ]
    body["delegationConfig"]["currency"] = "eur"  # inline fields are checked like a create
    refused = await api.http.post("/x402/permissions", json=body, headers=buyer.headers)
    assert refused.status_code == 400 and "currency" in refused.json()["message"]


async def test_scheme_must_fit_delegation_and_plan(api: Api, owner: Actor, buyer: Actor) -> None:
    crypto_plan = await api.plan(owner)
    fiat_plan = await api.plan(owner, fiat=True, price=2_000_000)
    crypto_delegation = await api.delegation(buyer)
    card_delegation = await api.delegation(buyer, "stripe")
    wrong_provider = await api.token_answer(buyer, crypto_plan, card_delegation, scheme=CRYPTO)
    assert wrong_provider.status_code == 400 and wrong_provider.json()["code"] == "BCK.X402.0034"
    fiat_with_crypto = await api.token_answer(buyer, fiat_plan, crypto_delegation, scheme=CRYPTO)
    assert fiat_with_crypto.status_code == 400
    assert fiat_with_crypto.json()["code"] == "BCK.X402.0035"
    assert "card-delegation" in fiat_with_crypto.json()["hint"]
    card_token = await api.token_answer(buyer, fiat_plan, card_delegation, scheme=CARD)
    assert card_token.status_code == 200, card_token.text
    decoded = decode_access_token(card_token.json()["accessToken"])
    assert decoded is not None and decoded["accepted"]["network"] == "stripe"
    unknown_plan = await api.token_answer(buyer, "55555", crypto_delegation)
    assert unknown_plan.status_code == 404


async def test_agent_must_exist_and_sell_the_plan(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id, other_plan = await api.plan(owner), await api.plan(owner)
    agent_id = await api.agent(owner, [other_plan])
    delegation_id = await api.delegation(buyer)
    unrelated = await api.token_answer(buyer, plan_id, delegation_id, agent_id=agent_id)
    assert unrelated.status_code == 400 and unrelated.json()["code"] == "BCK.X402.0036"
    ghost = await api.token_answer(buyer, plan_id, delegation_id, agent_id="did:svc:ghost")
    assert ghost.status_code == 404


def _reseal(document: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")


async def test_altered_or_forged_tokens_fail_verify(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await api.plan(owner, credits=10)
    await api.order(buyer, plan_id)
    token = await api.token(buyer, plan_id)
    document = sdk_decode(token)
    assert document is not None
    stolen = json.loads(json.dumps(document))
    stolen["payload"]["authorization"]["from"] = owner.address
    other_plan = json.loads(json.dumps(document))
    other_plan["accepted"]["planId"] = "12345"
    unsigned = json.loads(json.dumps(document))
    del unsigned["payload"]["signature"]
    candidates = {
        "altered payer": _reseal(stolen),
        "altered plan": _reseal(other_plan),
        "no signature": _reseal(unsigned),
        "bad signature": token[:-6] + ("AAAAAA" if not token.endswith("AAAAAA") else "BBBBBB"),
        "an API key": owner.key.split(":", 1)[1],
        "garbage": "not-a-token",
        "JSON list": _reseal([1, 2]),  # type: ignore[arg-type]
    }
    for name, candidate in candidates.items():
        result = await api.verify(owner, candidate, plan_id)
        assert result["isValid"] is False, name
        assert result["invalidReason"], name
    assert (await api.verify(owner, token, plan_id))["isValid"] is True
    # Re-encoding the decoded document (as the SDK's MCP transport does) keeps it valid.
    assert (await api.verify(owner, _reseal(document), plan_id))["isValid"] is True
