"""A stub of the service's facilitator on loopback, with the corrected rules (WIRE.md §4):
verify is a dry run that reserves nothing, settle burns, is idempotent on ``agentRequestId``,
and refuses a replayed v3 token (one with a nonce) with 403 ``BCK.X402.0059``.

It answers instantly (or hangs, on request), so the endpoint's own behaviour is what a test or
a benchmark sees. Tokens are base64url JSON naming the payer in ``payload.authorization.from``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections import Counter
from typing import Any

from aiohttp import web

PLAN_ID = "plan-1"
AGENT_ID = "agent-1"
BUILDER = "0x" + "b1" * 20


def fake_jwt(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}.c2ln"


#: an API key the plugin accepts for the stub (it checks shape, the stub checks nothing)
BUILDER_KEY = "local:" + fake_jwt({"sub": BUILDER})


def make_token(payer: str, nonce: str | None = None, plan_id: str = PLAN_ID) -> str:
    """An access token as the SDKs encode it; with a nonce it is a single-use v3 token."""
    authorization: dict[str, Any] = {"from": payer}
    if nonce is not None:
        authorization["nonce"] = nonce
    doc = {
        "x402Version": 2,
        "accepted": {"scheme": "svc:erc4337", "planId": plan_id, "extra": {"version": "1"}},
        "payload": {"authorization": authorization, "signature": "0x00"},
        "extensions": {},
    }
    raw = json.dumps(doc, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _payer_of(token: object) -> tuple[str | None, str | None]:
    if not isinstance(token, str):
        return None, None
    try:
        doc = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        auth = doc["payload"]["authorization"]
        return str(auth["from"]).lower(), auth.get("nonce")
    except (ValueError, KeyError, TypeError):
        return None, None


class StubService:
    """The facilitator, the plan and the balance endpoint, in memory."""

    def __init__(
        self, *, balance: int = 0, min_amount: int = 1, max_amount: int = 1, expose: bool = True
    ) -> None:
        self.default_balance = balance
        self.min_amount = min_amount
        self.max_amount = max_amount
        self.expose_payer = expose
        self.balances: dict[str, int] = {}
        #: credits a payer's delegation could still buy at settle (automatic top-up)
        self.top_up: dict[str, int] = {}
        self.burned = 0
        self.settled: dict[str, dict[str, Any]] = {}
        self.nonces: dict[str, str] = {}
        self.calls: Counter[str] = Counter()
        self.hang = asyncio.Event()  # set: every call waits until released
        self.hang_calls: set[str] = set()  # these calls wait until released
        self.release = asyncio.Event()
        self.down: set[str] = set()  # call names answering 503 ("*": all)
        self.faults: dict[str, tuple[int, dict[str, Any]]] = {}  # call name → (status, body)
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    def balance_of(self, payer: str) -> int:
        return self.balances.setdefault(payer.lower(), self.default_balance)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/api/v1/protocol/plans/{plan}", self._plan)
        app.router.add_get("/api/v1/protocol/plans/{plan}/balance/{holder}", self._balance)
        app.router.add_post("/api/v1/x402/verify", self._verify)
        app.router.add_post("/api/v1/x402/settle", self._settle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/api/v1"
        return self.base_url

    async def close(self) -> None:
        self.release.set()
        if self.runner is not None:
            await self.runner.cleanup()

    async def _gate(self, name: str) -> web.Response | None:
        self.calls[name] += 1
        if self.hang.is_set() or name in self.hang_calls:
            await self.release.wait()
        if name in self.down or "*" in self.down:
            return web.json_response({"code": "TEST.DOWN", "message": "down"}, status=503)
        if name in self.faults:
            status, body = self.faults[name]
            return web.json_response(body, status=status)
        return None

    async def _plan(self, request: web.Request) -> web.Response:
        if (down := await self._gate("plan")) is not None:
            return down
        plan = {
            "id": request.match_info["plan"],
            "metadata": {"main": {"name": "Stub plan"}},
            "registry": {
                "price": {"isCrypto": True},
                "credits": {
                    "amount": 1000,
                    "minAmount": self.min_amount,
                    "maxAmount": self.max_amount,
                },
            },
        }
        return web.json_response(plan)

    async def _balance(self, request: web.Request) -> web.Response:
        if (down := await self._gate("balance")) is not None:
            return down
        holder = request.match_info["holder"]
        return web.json_response(
            {"balance": str(self.balance_of(holder)), "isSubscriber": True, "holderAddress": holder}
        )

    async def _verify(self, request: web.Request) -> web.Response:
        if (down := await self._gate("verify")) is not None:
            return down
        body = await request.json()
        payer, _nonce = _payer_of(body.get("x402AccessToken"))
        if payer is None:
            return web.json_response({"isValid": False, "invalidReason": "token unreadable"})
        # a dry run, as the service's: it checks the balance (plus what a top-up could buy)
        # and reserves nothing
        amount = int(body.get("maxAmount") or self.min_amount)
        balance = self.balance_of(payer)
        if balance + self.top_up.get(payer, 0) < amount:
            return web.json_response(
                {
                    "isValid": False,
                    "invalidReason": f"insufficient credits: {balance} available, "
                    f"{amount} requested",
                }
            )
        request_id = str(uuid.uuid4())
        answer: dict[str, Any] = {
            "isValid": True,
            "agentRequestId": request_id,
            "agentRequest": {"agentRequestId": request_id, "balance": {"balance": str(balance)}},
        }
        if self.expose_payer:
            answer["payer"] = payer
        return web.json_response(answer)

    async def _settle(self, request: web.Request) -> web.Response:
        if (down := await self._gate("settle")) is not None:
            return down
        body = await request.json()
        request_id = str(body.get("agentRequestId") or uuid.uuid4())
        if request_id in self.settled:
            return web.json_response(self.settled[request_id])
        payer, nonce = _payer_of(body.get("x402AccessToken"))
        if payer is None:
            return web.json_response({"success": False, "errorReason": "token unreadable"})
        if nonce is not None:
            if self.nonces.get(nonce, request_id) != request_id:
                return web.json_response(
                    {"code": "BCK.X402.0059", "message": "the token was already used"},
                    status=403,
                )
            self.nonces[nonce] = request_id
        amount = int(body["maxAmount"])
        if self.balance_of(payer) < amount:
            return web.json_response({"success": False, "errorReason": "insufficient credits"})
        self.balances[payer] -= amount
        self.burned += amount
        answer = {
            "success": True,
            "transaction": "0x" + uuid.uuid4().hex,
            "network": "eip155:84532",
            "payer": payer,
            "creditsRedeemed": str(amount),
            "remainingBalance": str(self.balances[payer]),
        }
        self.settled[request_id] = answer
        return web.json_response(answer)
