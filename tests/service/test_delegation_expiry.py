"""A delegation that expires between two token requests, produced by the real sandbox's clock
(no mocked answer): the client replaces it once and the new token works."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from svc_gateway.encoding import decode_access_token, token_authorization
from svc_gateway.sandbox import SandboxServer, start_sandbox
from svc_gateway.sandbox.clock import ManualClock
from svc_gateway.sandbox.seed import envelope
from svc_gateway.service.client import ServiceClient
from tests.conftest import make_plan

WEEK = 7 * 24 * 3600


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def timed_sandbox(clock: ManualClock) -> AsyncIterator[SandboxServer]:
    server = await start_sandbox(clock=clock)
    yield server
    await server.close()


async def delegation_ids(server: SandboxServer, key: str) -> list[str]:
    client = ServiceClient(server.base_url, key)
    try:
        listed = await client._request("GET", "delegation")
    finally:
        await client.aclose()
    items = listed if isinstance(listed, list) else listed["delegations"]
    return [str(item["delegationId"]) for item in items]


async def test_an_expired_delegation_is_replaced_once_and_the_new_token_is_valid(
    timed_sandbox: SandboxServer, clock: ManualClock
) -> None:
    builder = await timed_sandbox.create_account("builder")
    subscriber = await timed_sandbox.create_account("subscriber")
    seller = ServiceClient(timed_sandbox.base_url, builder["apiKey"])
    buyer = ServiceClient(timed_sandbox.base_url, subscriber["apiKey"])
    try:
        plan_id = await make_plan(seller, builder["address"])
        await buyer.order_plan(plan_id)
        first = await buyer.get_access_token(plan_id, duration_secs=WEEK)
        assert len(await delegation_ids(timed_sandbox, subscriber["apiKey"])) == 1

        # The service's clock passes the delegation's expiry; the client still holds it.
        clock.advance(WEEK + 60)
        second = await buyer.get_access_token(plan_id, duration_secs=WEEK)

        made = await delegation_ids(timed_sandbox, subscriber["apiKey"])
        assert len(made) == 2, "exactly one replacement delegation, not one per attempt"
        assert second != first
        decoded = decode_access_token(second)
        assert decoded is not None
        assert token_authorization(decoded)["from"] == subscriber["address"]
        # The token minted on the replacement is one the seller can verify now.
        verdict = await seller._request(
            "POST",
            "x402/verify",
            body={
                "paymentRequired": envelope(plan_id),
                "x402AccessToken": second,
                "maxAmount": "1",
            },
        )
        assert verdict["isValid"] is True

        # A third request reuses the replacement: no delegation sprawl.
        await buyer.get_access_token(plan_id, duration_secs=WEEK)
        assert len(await delegation_ids(timed_sandbox, subscriber["apiKey"])) == 2
    finally:
        await seller.aclose()
        await buyer.aclose()
