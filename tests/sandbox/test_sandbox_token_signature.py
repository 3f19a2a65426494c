"""The access token's signature covers every field the token binds: editing any one of them
(plan, scheme, network, agent, verb, resource URL, payer, delegation, expiry, nonce, card
token) or adding a field makes verify and settle refuse it *because of the signature*."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from .support import CARD, Actor, Api, envelope
from .test_sandbox_tokens_v3 import URL, mint_v3

SIGNATURE_FAILED = "invalid access token: signature check failed"
Edit = Callable[[dict[str, Any]], None]


def _auth(doc: dict[str, Any]) -> dict[str, Any]:
    auth: dict[str, Any] = doc["payload"]["authorization"]
    return auth


def _set(path: tuple[str, ...], value: object) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


EDITS: dict[str, Edit] = {
    "accepted.planId": _set(("accepted", "planId"), "1"),
    "accepted.scheme": _set(("accepted", "scheme"), CARD),
    "accepted.network": _set(("accepted", "network"), "eip155:8453"),
    "accepted.extra.agentId": _set(("accepted", "extra", "agentId"), "did:svc:other"),
    "accepted.extra.httpVerb": _set(("accepted", "extra", "httpVerb"), "GET"),
    "resource.url": _set(("resource", "url"), URL + "/other"),
    "authorization.from": lambda d: _auth(d).update({"from": "0x" + "1" * 40}),
    "authorization.planId": lambda d: _auth(d).update({"planId": "1"}),
    "authorization.agentId": lambda d: _auth(d).update({"agentId": "did:svc:other"}),
    "authorization.delegationId": lambda d: _auth(d).update({"delegationId": "x"}),
    "authorization.validBefore": lambda d: _auth(d).update({"validBefore": "99999999999"}),
    "authorization.nonce": lambda d: _auth(d).update({"nonce": "0x" + "2" * 64}),
    "authorization.resourceUrl": lambda d: _auth(d).update({"resourceUrl": URL + "/x"}),
    "authorization.httpVerb": lambda d: _auth(d).update({"httpVerb": "GET"}),
    "authorization.sessionKeys": lambda d: _auth(d).update({"sessionKeys": []}),
    "an added field": _set(("extensions",), {"grant": "more"}),
}


def _rewrite(token: str, edit: Edit) -> str:
    doc = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    edit(doc)
    raw = json.dumps(doc, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("field", list(EDITS))
async def test_editing_a_bound_field_breaks_the_signature(
    api: Api, owner: Actor, buyer: Actor, field: str
) -> None:
    plan_id = await api.plan(owner, credits=5)
    assert (await api.order(buyer, plan_id)).status_code == 200
    agent_id = await api.agent(owner, [plan_id], endpoints=[{"POST": URL}])
    token = (await mint_v3(api, buyer, plan_id, agent_id)).json()["accessToken"]
    paid = envelope(plan_id, agent_id=agent_id, url=URL, verb="POST")
    assert (await api.verify(owner, token, plan_id, paid=paid))["isValid"] is True
    forged = _rewrite(token, EDITS[field])
    assert forged != token
    assert await api.verify(owner, forged, plan_id, paid=paid) == {
        "isValid": False,
        "invalidReason": SIGNATURE_FAILED,
    }
    settled = (await api.settle_answer(owner, forged, plan_id, None, paid=paid)).json()
    assert settled["success"] is False and settled["errorReason"] == SIGNATURE_FAILED
    assert await api.credits(plan_id, buyer) == 5


async def test_editing_a_card_tokens_delegation_claims_breaks_the_signature(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner, fiat=True, price=2_000_000, credits=4)
    token = await api.token(buyer, plan_id, scheme=CARD)

    def edit(doc: dict[str, Any]) -> None:
        head, _, rest = doc["payload"]["token"].partition(".")
        doc["payload"]["token"] = head + ".e30." + rest.partition(".")[2]

    forged = _rewrite(token, edit)
    verdict = await api.verify(owner, forged, plan_id, paid=envelope(plan_id, CARD))
    assert verdict == {"isValid": False, "invalidReason": SIGNATURE_FAILED}
