"""A local sandbox with a builder, a plan, a subscriber who bought it and a reusable token.

Everything goes over the sandbox's REST API (WIRE.md bodies), as an API user would do it;
the sandbox runs in its own process (``svc-gateway sandbox``) on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp

from svc_gateway.sandbox.seed import envelope
from svc_gateway.sandbox.seed import plan_body as seed_plan_body

from . import procs

#: credits granted by one order: enough for every benchmark request of a run
CREDITS = 1_000_000_000
SANDBOX_CODE = (
    "import sys; from svc_gateway.sandbox.server import main_sandbox; "
    "raise SystemExit(main_sandbox(sys.argv[1:]))"
)


@dataclass(frozen=True)
class Market:
    base_url: str
    builder_key: str
    builder_address: str
    subscriber_key: str
    subscriber_address: str
    plan_id: str
    token: str


@contextmanager
def sandbox(db: str = ":memory:") -> Iterator[dict[str, Any]]:
    """A sandbox process; yields its ready line (``baseUrl`` and two accounts)."""
    with procs.spawn(["-c", SANDBOX_CODE, "--host", "127.0.0.1", "--port", "0", "--db", db]) as r:
        yield r


def plan_body(owner: str, credits: int = CREDITS) -> dict[str, Any]:
    return seed_plan_body(owner, name="Bench credits", credits=credits)


async def _call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    key: str,
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}", "Service-Version": "1.1"}
    async with session.request(method, url, json=body, headers=headers) as response:
        data: dict[str, Any] = await response.json()
        if response.status >= 300:
            raise RuntimeError(f"{method} {url} -> {response.status}: {data}")
        return data


async def build_market(ready: dict[str, Any]) -> Market:
    """Plan by the builder, order + delegation + token by the subscriber."""
    base = str(ready["baseUrl"])
    builder, subscriber = ready["accounts"]["builder"], ready["accounts"]["subscriber"]
    async with aiohttp.ClientSession() as session:
        plan = await _call(
            session,
            "POST",
            f"{base}/protocol/plans",
            builder["apiKey"],
            plan_body(builder["address"]),
        )
        plan_id = str(plan["planId"])
        await _call(session, "POST", f"{base}/protocol/plans/{plan_id}/order", subscriber["apiKey"])
        delegation = await _call(
            session,
            "POST",
            f"{base}/delegation/create",
            subscriber["apiKey"],
            {
                "provider": "erc4337",
                "spendingLimitCents": "1000000",
                "durationSecs": "86400",
                "currency": "usdc",
            },
        )
        token = await _token(session, base, subscriber["apiKey"], plan_id, delegation)
    return Market(
        base_url=base,
        builder_key=builder["apiKey"],
        builder_address=builder["address"],
        subscriber_key=subscriber["apiKey"],
        subscriber_address=subscriber["address"],
        plan_id=plan_id,
        token=token,
    )


async def _token(
    session: aiohttp.ClientSession, base: str, key: str, plan_id: str, delegation: dict[str, Any]
) -> str:
    """A (v2, reusable) x402 access token for ``plan_id`` on an erc4337 delegation."""
    answer = await _call(
        session,
        "POST",
        f"{base}/x402/permissions",
        key,
        {
            "accepted": {
                "scheme": "svc:erc4337",
                "network": "eip155:84532",
                "planId": plan_id,
                "extra": {},
            },
            "delegationConfig": {"delegationId": delegation["delegationId"]},
        },
    )
    return str(answer["accessToken"])


def seed(db: str, settles: int) -> dict[str, Any]:
    """A database with ``settles`` settled requests of history (the sandbox's own seeder)."""
    from svc_gateway.sandbox.seed import seed_settles

    return seed_settles(db, settles)


async def seeded_market(ready: dict[str, Any], seeded: dict[str, Any]) -> Market:
    """The seeded owner, buyer and plan on a running sandbox, with a fresh token."""
    base = str(ready["baseUrl"])
    owner, buyer = seeded["owner"], seeded["buyer"]
    async with aiohttp.ClientSession() as session:
        token = await _token(session, base, buyer["apiKey"], str(seeded["planId"]), seeded)
    return Market(
        base_url=base,
        builder_key=owner["apiKey"],
        builder_address=owner["address"],
        subscriber_key=buyer["apiKey"],
        subscriber_address=buyer["address"],
        plan_id=str(seeded["planId"]),
        token=token,
    )


async def _settle_loop(market: Market, concurrency: int, duration: float) -> tuple[int, int]:
    """Closed loop of verify+settle pairs (the builder's key); returns (pairs done, errors)."""
    headers = {
        "Authorization": f"Bearer {market.builder_key}",
        "Service-Version": "1.1",
        "Content-Type": "application/json",
    }
    body = {
        "paymentRequired": envelope(market.plan_id),
        "x402AccessToken": market.token,
        "maxAmount": "1",
    }
    done = errors = 0
    deadline = time.perf_counter() + duration
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=10)
    ) as session:

        async def worker() -> None:
            nonlocal done, errors
            while time.perf_counter() < deadline:
                try:
                    async with session.post(
                        f"{market.base_url}/x402/verify", json=body, headers=headers
                    ) as response:
                        verdict = await response.json()
                    if not verdict.get("isValid"):
                        errors += 1
                        continue
                    settle = {**body, "agentRequestId": verdict.get("agentRequestId")}
                    async with session.post(
                        f"{market.base_url}/x402/settle", json=settle, headers=headers
                    ) as response:
                        answer = await response.json()
                    if answer.get("success"):
                        done += 1
                    else:
                        errors += 1
                except (aiohttp.ClientError, TimeoutError):
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, errors


def settle_rate(market: Market, concurrency: int, duration: float) -> tuple[float, int]:
    """verify+settle pairs per second, and the number of failed pairs."""
    start = time.perf_counter()
    done, errors = asyncio.run(_settle_loop(market, concurrency, duration))
    return done / (time.perf_counter() - start), errors
