"""Token version 3: resource-bound, single use (payments_py ``x402/token_version.py``)."""

from __future__ import annotations

from typing import Any

import httpx
from payments_py.x402.token import decode_access_token as sdk_decode
from payments_py.x402.token import is_single_use_access_token

from svc_gateway.encoding import token_authorization

from .support import CRYPTO, Actor, Api, envelope

URL = "http://127.0.0.1:8402/svc/agent"


async def seller(api: Api, owner: Actor, buyer: Actor, credits: int = 10) -> tuple[str, str]:
    plan_id = await api.plan(owner, credits=credits)
    assert (await api.order(buyer, plan_id)).status_code == 200
    agent_id = await api.agent(owner, [plan_id], endpoints=[{"POST": URL}])
    return plan_id, agent_id


async def mint_v3(
    api: Api,
    buyer: Actor,
    plan_id: str,
    agent_id: str | None,
    *,
    url: str | None = URL,
    verb: str | None = "POST",
    version: object = 3,
) -> httpx.Response:
    extra: dict[str, Any] = {}
    if agent_id:
        extra["agentId"] = agent_id
    if verb is not None:
        extra["httpVerb"] = verb
    body: dict[str, Any] = {
        "accepted": {
            "scheme": CRYPTO,
            "network": "eip155:84532",
            "planId": plan_id,
            "extra": extra,
        },
        "delegationConfig": {"delegationId": await api.delegation(buyer)},
        "tokenVersion": version,
    }
    if url is not None:
        body["resource"] = {"url": url}
    return await api.http.post("/x402/permissions", json=body, headers=buyer.headers)


async def token_v3(api: Api, buyer: Actor, plan_id: str, agent_id: str) -> str:
    answer = await mint_v3(api, buyer, plan_id, agent_id)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["accessToken"])


def paid(plan_id: str, agent_id: str, url: str = URL, verb: str = "POST") -> dict[str, Any]:
    return envelope(plan_id, agent_id=agent_id, url=url, verb=verb)


async def test_v3_token_is_bound_and_carries_a_fresh_nonce(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id, agent_id = await seller(api, owner, buyer)
    first = await token_v3(api, buyer, plan_id, agent_id)
    second = await token_v3(api, buyer, plan_id, agent_id)
    assert is_single_use_access_token(first) and is_single_use_access_token(second)
    decoded = sdk_decode(first)
    assert decoded is not None
    assert decoded["resource"] == {"url": URL}
    assert decoded["accepted"]["extra"] == {"version": "1", "agentId": agent_id, "httpVerb": "POST"}
    nonce = token_authorization(decoded)["nonce"]
    other = sdk_decode(second)
    assert other is not None and token_authorization(other)["nonce"] != nonce
    assert isinstance(nonce, str) and nonce.startswith("0x") and len(nonce) == 66


async def test_v3_settles_once_then_bck_x402_0059(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id, agent_id = await seller(api, owner, buyer)
    token = await token_v3(api, buyer, plan_id, agent_id)
    envelope_ = paid(plan_id, agent_id)
    first = await api.verify(owner, token, plan_id, paid=envelope_)
    second = await api.verify(owner, token, plan_id, paid=envelope_)
    assert first["isValid"] and second["isValid"]  # verify never consumes
    settled = await api.settle_answer(
        owner, token, plan_id, first["agentRequestId"], paid=envelope_
    )
    assert settled.status_code == 200 and settled.json()["success"] is True
    replay = await api.settle_answer(owner, token, plan_id, first["agentRequestId"], paid=envelope_)
    assert replay.json() == settled.json()  # same agentRequestId: idempotent, no second burn
    spent = await api.settle_answer(owner, token, plan_id, second["agentRequestId"], paid=envelope_)
    assert spent.status_code == 403 and spent.json()["code"] == "BCK.X402.0059"
    bare = await api.settle_answer(owner, token, plan_id, None, paid=envelope_)
    assert bare.status_code == 403 and bare.json()["code"] == "BCK.X402.0059"
    # Verify still passes (a dry run never reads the replay store); settle is what refuses.
    assert (await api.verify(owner, token, plan_id, paid=envelope_))["isValid"] is True
    assert await api.credits(plan_id, buyer) == 9


async def test_v2_tokens_stay_reusable(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id, agent_id = await seller(api, owner, buyer)
    token = await api.token(buyer, plan_id, agent_id=agent_id)
    assert not is_single_use_access_token(token)
    for left in ("9", "8"):
        answer = await api.settle_answer(owner, token, plan_id, None, paid=paid(plan_id, agent_id))
        assert answer.json()["success"] is True and answer.json()["remainingBalance"] == left


async def test_v3_token_refused_for_another_url_or_verb(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=10)
    assert (await api.order(buyer, plan_id)).status_code == 200
    other = "http://127.0.0.1:8402/svc/other"
    agent_id = await api.agent(
        owner, [plan_id], endpoints=[{"POST": URL}, {"POST": other}, {"GET": URL}]
    )
    token = await token_v3(api, buyer, plan_id, agent_id)
    cases = {
        "other URL": paid(plan_id, agent_id, url=other),
        "other verb": paid(plan_id, agent_id, verb="GET"),
    }
    for name, envelope_ in cases.items():
        verified = await api.verify(owner, token, plan_id, paid=envelope_)
        assert verified["isValid"] is False, name
        assert "bound to another" in verified["invalidReason"], name
        settled = (await api.settle_answer(owner, token, plan_id, None, paid=envelope_)).json()
        assert settled["success"] is False, name
    # An envelope naming no verb is not held to the token's (the SDK's MCP paywall verifies
    # without one: payments_py mcp/core/auth.py); the URL binding still applies.
    no_verb = await api.verify(
        owner, token, plan_id, paid=envelope(plan_id, agent_id=agent_id, url=URL)
    )
    assert no_verb["isValid"] is True
    # The SDK's FastAPI paywall puts the request path in resource.url: that still matches.
    relative = await api.verify(owner, token, plan_id, paid=paid(plan_id, agent_id, "/svc/agent"))
    assert relative["isValid"] is True
    assert await api.credits(plan_id, buyer) == 10


async def test_v3_mint_rules(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id, agent_id = await seller(api, owner, buyer)
    unregistered = await mint_v3(api, buyer, plan_id, agent_id, url="http://127.0.0.1:9/x")
    assert unregistered.status_code == 400
    assert unregistered.json()["code"] == "BCK.PROTOCOL.0031"
    wrong_verb = await mint_v3(api, buyer, plan_id, agent_id, verb="DELETE")
    assert wrong_verb.status_code == 400 and wrong_verb.json()["code"] == "BCK.PROTOCOL.0031"
    for name, answer in {
        "no resource": await mint_v3(api, buyer, plan_id, agent_id, url=None),
        "no verb": await mint_v3(api, buyer, plan_id, agent_id, verb=None),
        "no agent": await mint_v3(api, buyer, plan_id, None),
        "version 4": await mint_v3(api, buyer, plan_id, agent_id, version=4),
        "blank url": await mint_v3(api, buyer, plan_id, agent_id, url="  "),
    }.items():
        assert answer.status_code == 400, name
        assert "Traceback" not in answer.text
    lower = await mint_v3(api, buyer, plan_id, agent_id, verb="post")
    assert lower.status_code == 200  # the verb is upper-cased as the SDK does
    decoded = sdk_decode(lower.json()["accessToken"])
    assert decoded is not None and decoded["accepted"]["extra"]["httpVerb"] == "POST"


async def test_agent_without_endpoints_allows_any_resource(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=3)
    assert (await api.order(buyer, plan_id)).status_code == 200
    agent_id = await api.agent(owner, [plan_id])
    token = await token_v3(api, buyer, plan_id, agent_id)
    settled = await api.settle_answer(owner, token, plan_id, None, paid=paid(plan_id, agent_id))
    assert settled.json()["success"] is True


async def test_token_request_field_checks(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id, agent_id = await seller(api, owner, buyer)
    as_text = await mint_v3(api, buyer, plan_id, agent_id, version="3")
    assert as_text.status_code == 200 and is_single_use_access_token(as_text.json()["accessToken"])
    delegation_id = await api.delegation(buyer)
    base: dict[str, Any] = {
        "accepted": {"scheme": CRYPTO, "planId": plan_id, "extra": {"agentId": agent_id}},
        "delegationConfig": {"delegationId": delegation_id},
    }
    bad_bodies = {
        "resource not an object": {**base, "resource": "http://x"},
        "verb not text": {
            **base,
            "accepted": {**base["accepted"], "extra": {"agentId": agent_id, "httpVerb": 5}},
        },
    }
    for name, body in bad_bodies.items():
        answer = await api.http.post("/x402/permissions", json=body, headers=buyer.headers)
        assert answer.status_code == 400, name
    other_plan = await api.plan(owner)
    limited = await api.http.post(
        "/delegation/create",
        json={
            "provider": "erc4337",
            "spendingLimitCents": "100",
            "durationSecs": "600",
            "currency": "usdc",
            "planId": other_plan,
        },
        headers=buyer.headers,
    )
    body = {**base, "delegationConfig": {"delegationId": limited.json()["delegationId"]}}
    answer = await api.http.post("/x402/permissions", json=body, headers=buyer.headers)
    assert answer.status_code == 403 and answer.json()["code"] == "BCK.X402.0037"


async def test_inline_card_delegation_uses_the_card_id(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, fiat=True, price=2_000_000)
    card_id = (await api.http.get("/payment-methods", headers=buyer.headers)).json()[0]["id"]
    body = {
        "accepted": {"scheme": "svc:card-delegation", "network": "stripe", "planId": plan_id},
        "delegationConfig": {
            "cardId": card_id,
            "spendingLimitCents": 500,
            "durationSecs": 600,
            "currency": "usd",
        },
    }
    answer = await api.http.post("/x402/permissions", json=body, headers=buyer.headers)
    assert answer.status_code == 200, answer.text
    listed = (await api.http.get("/delegation", headers=buyer.headers)).json()
    assert [(d["provider"], d["cardId"]) for d in listed] == [("stripe", card_id)]


async def test_token_stops_paying_when_its_agent_drops_the_plan(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, credits=5)
    assert (await api.order(buyer, plan_id)).status_code == 200
    agent_id = await api.agent(owner, [plan_id])
    token = await api.token(buyer, plan_id, agent_id=agent_id)
    dropped = await api.http.delete(
        f"/protocol/agents/{agent_id}/plan/{plan_id}", headers=owner.headers
    )
    assert dropped.status_code == 200
    verified = await api.verify(owner, token, plan_id)
    assert verified["isValid"] is False and "no longer sells" in verified["invalidReason"]
    assert await api.credits(plan_id, buyer) == 5
