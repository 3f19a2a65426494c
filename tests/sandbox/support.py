"""Helpers that speak the sandbox's REST API the way a client does (WIRE.md bodies)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from svc_gateway.sandbox import ManualClock, SandboxServer

USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
REQUEST_TTL = 60.0
CRYPTO = "svc:erc4337"
CARD = "svc:card-delegation"
#: A delegation budget (cents) below one order of a 1 USDC plan: such a token never tops up.
NO_TOPUP = "99"


#: The sandbox's own clock seam; tests move time with ``advance``.
FakeClock = ManualClock


@dataclass(frozen=True)
class Actor:
    key: str
    address: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def plan_body(
    owner: Actor,
    *,
    name: str = "Starter",
    credits: int = 100,
    low: int = 1,
    high: int = 1,
    duration: int = 0,
    fiat: bool = False,
    price: int = 1_000_000,
    trial: bool = False,
    max_orders: int | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadataAttributes": {"name": name, "description": "test plan", "tags": ["t"]},
        "priceConfig": {
            "tokenAddress": "0x" + "0" * 40 if fiat else USDC,
            "amounts": [str(price)] if price else [],
            "receivers": [owner.address] if price else [],
            "isCrypto": not fiat,
            **({"currency": "USD"} if fiat else {}),
        },
        "creditsConfig": {
            "isRedemptionAmountFixed": low == high and duration == 0,
            "redemptionType": 4,
            "onchainMirror": False,
            "durationSecs": str(duration),
            "amount": str(credits),
            "minAmount": str(low),
            "maxAmount": str(high),
        },
    }
    if trial:
        body["isTrialPlan"] = True
    if max_orders is not None:
        body["maxOrders"] = str(max_orders)
    return body


def envelope(
    plan_id: str,
    scheme: str = CRYPTO,
    *,
    agent_id: str | None = None,
    url: str = "",
    verb: str | None = None,
) -> dict[str, Any]:
    extra: dict[str, Any] = {"version": "1"}
    if agent_id:
        extra["agentId"] = agent_id
    if verb:
        extra["httpVerb"] = verb
    network = "eip155:84532" if scheme == CRYPTO else "stripe"
    return {
        "x402Version": 2,
        "resource": {"url": url},
        "accepts": [{"scheme": scheme, "network": network, "planId": plan_id, "extra": extra}],
        "extensions": {},
    }


class Api:
    """A thin client over one httpx connection pool to the sandbox."""

    def __init__(self, server: SandboxServer, http: httpx.AsyncClient) -> None:
        self.server = server
        self.http = http

    async def account(self, label: str = "", version: str | None = None) -> Actor:
        body: dict[str, Any] = {"label": label}
        if version:
            body["apiVersion"] = version
        answer = await self.http.post("/sandbox/accounts", json=body)
        assert answer.status_code == 201, answer.text
        data = answer.json()
        return Actor(data["apiKey"], data["address"])

    async def plan(self, owner: Actor, **options: Any) -> str:
        answer = await self.http.post(
            "/protocol/plans", json=plan_body(owner, **options), headers=owner.headers
        )
        assert answer.status_code == 201, answer.text
        return str(answer.json()["planId"])

    async def agent(self, owner: Actor, plans: list[str], **api: Any) -> str:
        body = {"metadataAttributes": {"name": "Agent"}, "agentApiAttributes": api, "plans": plans}
        answer = await self.http.post("/protocol/agents", json=body, headers=owner.headers)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["data"]["agentId"])

    async def order(self, buyer: Actor, plan_id: str) -> httpx.Response:
        return await self.http.post(f"/protocol/plans/{plan_id}/order", headers=buyer.headers)

    async def delegation(
        self,
        buyer: Actor,
        provider: str = "erc4337",
        *,
        duration: int = 86400,
        limit: str = "10000",
        max_transactions: int | None = None,
    ) -> str:
        body: dict[str, Any] = {
            "provider": provider,
            "spendingLimitCents": limit,
            "durationSecs": str(duration),
            "currency": "usdc" if provider == "erc4337" else "usd",
        }
        if provider != "erc4337":
            methods = await self.http.get(
                "/payment-methods", params={"provider": provider}, headers=buyer.headers
            )
            body["providerPaymentMethodId"] = methods.json()[0]["id"]
        if max_transactions is not None:
            body["maxTransactions"] = max_transactions
        answer = await self.http.post("/delegation/create", json=body, headers=buyer.headers)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["delegationId"])

    async def token_answer(
        self,
        buyer: Actor,
        plan_id: str,
        delegation_id: str | None,
        *,
        scheme: str = CRYPTO,
        agent_id: str | None = None,
        resource: str | None = None,
    ) -> httpx.Response:
        body: dict[str, Any] = {
            "accepted": {
                "scheme": scheme,
                "network": "eip155:84532" if scheme == CRYPTO else "stripe",
                "planId": plan_id,
                "extra": {"agentId": agent_id} if agent_id else {},
            },
            "delegationConfig": {"delegationId": delegation_id} if delegation_id else {},
        }
        if resource is not None:  # a v2 token carrying resource.url arms the allow-list
            body["resource"] = {"url": resource}
        return await self.http.post("/x402/permissions", json=body, headers=buyer.headers)

    async def token(
        self, buyer: Actor, plan_id: str, *, limit: str = "10000", **options: Any
    ) -> str:
        """A v2 token from a new delegation of ``limit`` cents (``NO_TOPUP``: never tops up)."""
        scheme = options.get("scheme", CRYPTO)
        delegation_id = await self.delegation(
            buyer, "erc4337" if scheme == CRYPTO else "stripe", limit=limit
        )
        answer = await self.token_answer(buyer, plan_id, delegation_id, **options)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["accessToken"])

    async def verify(
        self,
        caller: Actor,
        token: str,
        plan_id: str,
        amount: str = "1",
        paid: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body = {
            "paymentRequired": paid or envelope(plan_id),
            "x402AccessToken": token,
            "maxAmount": amount,
        }
        answer = await self.http.post("/x402/verify", json=body, headers=caller.headers)
        assert answer.status_code == 200, answer.text
        data: dict[str, Any] = answer.json()
        return data

    async def settle_answer(
        self,
        caller: Actor,
        token: str,
        plan_id: str,
        request_id: str | None,
        amount: str = "1",
        paid: dict[str, Any] | None = None,
    ) -> httpx.Response:
        body: dict[str, Any] = {
            "paymentRequired": paid or envelope(plan_id),
            "x402AccessToken": token,
            "maxAmount": amount,
        }
        if request_id is not None:
            body["agentRequestId"] = request_id
        return await self.http.post("/x402/settle", json=body, headers=caller.headers)

    async def balance(self, plan_id: str, holder: Actor) -> dict[str, Any]:
        answer = await self.http.get(f"/protocol/plans/{plan_id}/balance/{holder.address}")
        assert answer.status_code == 200, answer.text
        data: dict[str, Any] = answer.json()
        return data

    async def credits(self, plan_id: str, holder: Actor) -> int:
        return int((await self.balance(plan_id, holder))["balance"])

    async def ledger(self, plan_id: str, holder: Actor) -> dict[str, int]:
        answer = await self.http.get(f"/sandbox/ledger/{plan_id}/{holder.address}")
        assert answer.status_code == 200, answer.text
        return {
            k: int(v)
            for k, v in answer.json().items()
            if k in ("granted", "burned", "balance", "expired", "auditGranted", "auditBurned")
        }
