"""No input reaches a 5xx: a sweep of malformed bodies and parameters over every route."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

from .support import CARD, Actor, Api, envelope, plan_body

BAD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**60,
    1.5,
    "",
    "x",
    "-5",
    "9" * 90,
    "\ud800",  # a lone surrogate: valid JSON, not encodable as UTF-8
    "é\u0000",
    [],
    {},
    [1],
    {"a": 1},
]
RAW_BODIES = [
    b"",
    b"null",
    b"[]",
    b"{",
    b'"text"',
    b"1e999",
    b"NaN",
    b'{"a": NaN}',
    b"\xff\xfe",
    b"[" * 5000,
    b'{"a":' * 3000,
    b'{"maxAmount": 9007199254740993}',
]


def variants(good: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The good body with each field (two levels deep) replaced by each bad value or dropped."""
    for key, value in good.items():
        for bad in BAD_VALUES:
            yield {**good, key: bad}
        yield {k: v for k, v in good.items() if k != key}
        if isinstance(value, dict):
            for inner in value:
                for bad in BAD_VALUES:
                    yield {**good, key: {**value, inner: bad}}


async def sweep(
    http: httpx.AsyncClient, method: str, path: str, actor: Actor, good: dict[str, Any] | None
) -> int:
    seen = 0
    bodies: list[bytes] = list(RAW_BODIES)
    if good is not None:
        bodies += [json.dumps(b).encode() for b in variants(good)]
    for raw in bodies:
        answer = await http.request(method, path, content=raw, headers=actor.headers)
        seen += 1
        assert answer.status_code < 500, (method, path, raw[:80], answer.text)
        if answer.status_code >= 400:
            error = answer.json()
            assert error["code"].startswith("BCK.") and error["message"], answer.text
    return seen


async def test_malformed_bodies_never_reach_a_5xx(api: Api, owner: Actor, buyer: Actor) -> None:
    plan_id = await api.plan(owner)
    fiat_id = await api.plan(owner, fiat=True, price=2_000_000)
    await api.order(buyer, plan_id)
    agent_id = await api.agent(owner, [plan_id])
    delegation_id = await api.delegation(buyer)
    token = await api.token(buyer, plan_id)
    request_id = (await api.verify(owner, token, plan_id))["agentRequestId"]
    card = (await api.http.get("/payment-methods", headers=buyer.headers)).json()[0]["id"]
    paid = {"paymentRequired": envelope(plan_id), "x402AccessToken": token, "maxAmount": "1"}
    routes: list[tuple[str, str, Actor, dict[str, Any] | None]] = [
        ("POST", "/protocol/plans", owner, plan_body(owner)),
        (
            "POST",
            "/protocol/agents",
            owner,
            {
                "metadataAttributes": {"name": "a"},
                "agentApiAttributes": {"endpoints": []},
                "plans": [plan_id],
            },
        ),
        (
            "POST",
            "/protocol/agents/plans",
            owner,
            {"plan": plan_body(owner), "agent": {"metadataAttributes": {"name": "a"}}},
        ),
        ("POST", f"/protocol/plans/{plan_id}/order", buyer, None),
        (
            "POST",
            "/protocol/plans/mint",
            owner,
            {"planId": plan_id, "amount": "1", "creditsReceiver": buyer.address},
        ),
        (
            "POST",
            "/protocol/plans/mintExpirable",
            owner,
            {
                "planId": plan_id,
                "creditsAmount": "1",
                "creditsReceiver": buyer.address,
                "creditsDuration": "60",
            },
        ),
        ("POST", "/protocol/plans/burn", buyer, {"planId": plan_id, "creditsAmount": "1"}),
        (
            "POST",
            "/protocol/plans/redeem",
            owner,
            {
                "agentRequestId": "r-1",
                "planId": plan_id,
                "redeemFrom": buyer.address,
                "amount": "1",
            },
        ),
        ("POST", f"/protocol/agents/{agent_id}/plan/{plan_id}", owner, None),
        ("POST", "/fiat/stripe/payment", buyer, {"planId": fiat_id, "sessionType": "embedded"}),
        (
            "POST",
            "/delegation/create",
            buyer,
            {
                "provider": "stripe",
                "spendingLimitCents": "100",
                "durationSecs": "60",
                "currency": "usd",
                "providerPaymentMethodId": card,
                "planId": fiat_id,
                "maxTransactions": 3,
            },
        ),
        ("PATCH", f"/payment-methods/{card}", buyer, {"alias": "a", "allowedApiKeyIds": []}),
        (
            "POST",
            "/x402/permissions",
            buyer,
            {
                "accepted": {
                    "scheme": "svc:erc4337",
                    "network": "eip155:84532",
                    "planId": plan_id,
                    "extra": {"agentId": agent_id},
                },
                "delegationConfig": {"delegationId": delegation_id},
            },
        ),
        (
            "POST",
            "/x402/permissions",
            buyer,
            {
                "accepted": {
                    "scheme": "svc:erc4337",
                    "planId": plan_id,
                    "extra": {"agentId": agent_id, "httpVerb": "POST"},
                },
                "resource": {"url": "http://127.0.0.1:8402/svc/agent"},
                "tokenVersion": 3,
                "delegationConfig": {
                    "spendingLimitCents": 100,
                    "durationSecs": 60,
                    "currency": "usdc",
                },
            },
        ),
        ("POST", "/x402/verify", owner, paid),
        ("POST", "/x402/settle", owner, {**paid, "agentRequestId": request_id}),
        ("POST", "/sandbox/accounts", owner, {"label": "x", "apiVersion": "1.1"}),
    ]
    total = 0
    for method, path, actor, good in routes:
        total += await sweep(api.http, method, path, actor, good)
    assert total > 500
    card_body = {"accepted": {"scheme": CARD, "planId": fiat_id}, "delegationConfig": {}}
    answer = await api.http.post("/x402/permissions", json=card_body, headers=buyer.headers)
    assert answer.status_code == 400


async def test_odd_path_and_query_parameters_never_reach_a_5xx(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await api.plan(owner)
    agent_id = await api.agent(owner, [plan_id])
    odd = ["0", "-1", "1" * 40, "abc", "%00", "%ff", "did:svc:", "..", "x" * 3000, "%E2%82%AC"]
    templates = [
        ("GET", "/protocol/plans/{}"),
        ("GET", "/protocol/plans/{}/balance/" + buyer.address),
        ("GET", f"/protocol/plans/{plan_id}/balance/{{}}"),
        ("GET", "/protocol/plans/{}/agents"),
        ("GET", "/protocol/agents/{}"),
        ("GET", "/protocol/agents/{}/plans"),
        ("DELETE", f"/protocol/agents/{agent_id}/plan/{{}}"),
        ("DELETE", f"/protocol/agents/{{}}/plan/{plan_id}"),
        ("POST", "/protocol/plans/{}/order"),
        ("GET", "/sandbox/ledger/{}/" + buyer.address),
        ("PATCH", "/payment-methods/{}"),
    ]
    for method, template in templates:
        for value in odd:
            answer = await api.http.request(
                method, template.format(value), headers=owner.headers, json={}
            )
            assert answer.status_code < 500, (method, template, value, answer.text)
    queries = (
        [{"page": v} for v in odd]
        + [{"offset": v} for v in odd]
        + [{"pageSize": v} for v in odd]
        + [{"sortBy": v} for v in odd]
        + [{"sortOrder": v} for v in odd]
        + [{"provider": v} for v in odd]
    )
    for path in (
        "/protocol/plans",
        "/protocol/agents",
        f"/protocol/plans/{plan_id}/agents",
        f"/protocol/agents/{agent_id}/plans",
        "/delegation",
        "/payment-methods",
    ):
        for params in queries:
            answer = await api.http.get(path, params=params, headers=owner.headers)
            assert answer.status_code < 500, (path, params, answer.text)
    for method in ("PUT", "PATCH", "DELETE"):
        answer = await api.http.request(method, "/protocol/plans", headers=owner.headers)
        assert answer.status_code == 405 and answer.json()["code"] == "BCK.COMMON.0005"


async def test_body_over_one_mebibyte_is_413(api: Api, owner: Actor) -> None:
    body = plan_body(owner)
    body["metadataAttributes"]["description"] = "x" * (1024 * 1024)
    answer = await api.http.post("/protocol/plans", json=body, headers=owner.headers)
    assert answer.status_code == 413
    assert answer.json()["code"] == "BCK.COMMON.0013"
    assert answer.headers["Service-Version"] == "1.1"


async def test_browser_login_redirects_a_new_key_to_the_loopback_callback(api: Api) -> None:
    origin = api.server.origin
    async with httpx.AsyncClient(follow_redirects=False) as browser:
        callback = "http://127.0.0.1:5555/callback/n0nce?state=abc"
        answer = await browser.get(f"{origin}/auth/cli", params={"callback_url": callback})
        assert answer.status_code == 302
        location = httpx.URL(answer.headers["location"])
        assert location.host == "127.0.0.1" and location.port == 5555
        assert location.path == "/callback/n0nce"
        assert location.params["state"] == "abc"
        key = location.params["svc_api_key"]
        assert key.startswith("local:")
        works = await api.http.get("/meta/versions", headers={"Authorization": f"Bearer {key}"})
        assert works.status_code == 200
        localhost = "http://localhost:7777/cb"
        answer = await browser.get(f"{origin}/auth/cli", params={"callback_url": localhost})
        assert answer.status_code == 302
        for bad in (
            "https://127.0.0.1:5555/cb",
            "http://evil.example:5555/cb",
            "http://127.0.0.1/cb",
            "javascript:alert(1)",
            "",
            "http://u:p@127.0.0.1:1/",
        ):
            refused = await browser.get(f"{origin}/auth/cli", params={"callback_url": bad})
            assert refused.status_code == 400, bad
            assert "svc_api_key" not in refused.headers.get("location", "")
        login = await browser.get(f"{origin}/login")
        assert login.status_code == 200 and "text/html" in login.headers["content-type"]


async def test_every_error_says_what_to_do_next(api: Api, owner: Actor, buyer: Actor) -> None:
    """Issue 14: each error envelope carries a non-empty hint, whichever path raised it."""
    plan_id = await api.plan(owner)
    agent_id = await api.agent(owner, [plan_id])
    h = owner.headers
    answers = [
        await api.http.get("/no/such/route"),
        await api.http.patch("/protocol/plans", headers=h),
        await api.http.post("/protocol/plans", content=b"{", headers=h),
        await api.http.post("/protocol/plans", json={}, headers=h),
        await api.http.get("/protocol/plans/123"),
        await api.http.get("/protocol/agents/did:svc:none"),
        await api.http.delete(f"/protocol/agents/{agent_id}/plan/{plan_id}", headers=buyer.headers),
        await api.http.get("/protocol/plans"),
        await api.http.post("/x402/settle", json={}, headers=h),
        await api.http.post("/mpp/verify", json={}),
    ]
    for answer in answers:
        body = answer.json()
        assert answer.status_code >= 400 and body["code"].startswith("BCK."), answer.text
        assert isinstance(body["hint"], str) and len(body["hint"]) > 10, answer.text


async def test_the_login_page_tells_to_paste_the_key_as_issued(api: Api) -> None:
    page = await api.http.get(api.server.origin + "/login")
    assert "/svc_login &lt;API_KEY&gt;" in page.text
    assert "/svc_login local:" not in page.text  # the key already starts with local:
