"""Deadlines over real loopback HTTP: a hung or slow-drip service cannot hold a call past its
timeout, and the call's retries share that one deadline. Each wait here is bounded by an outer
``asyncio.timeout`` far above the client's own, so a regression fails instead of hanging."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from svc_gateway.sandbox import SandboxServer
from svc_gateway.service import errors
from svc_gateway.service.client import ServiceClient
from tests.conftest import make_plan
from tests.service.proxy import FaultProxy, drop, hang, reset_after_forward, slow_drip, start_proxy

OUTER = 20.0  # far above every client timeout below: reaching it means the deadline failed


@pytest.fixture
async def proxy(sandbox: SandboxServer) -> AsyncIterator[FaultProxy]:
    proxy = await start_proxy(sandbox.base_url)
    yield proxy
    await proxy.close()


async def no_sleep(delay: float) -> None:
    return None


def client_via(proxy: FaultProxy, sandbox: SandboxServer, key: str, timeout: float):
    return ServiceClient(proxy.url(sandbox.base_url), key, timeout=timeout, sleep=no_sleep)


async def test_a_slow_drip_answer_cannot_hold_a_call_past_its_timeout(
    proxy: FaultProxy, sandbox: SandboxServer, builder: dict[str, str], plan_id: str
) -> None:
    # one byte every 0.5 s for 50 s: each read is quick, only an overall deadline stops it
    proxy.always[f"protocol/plans/{plan_id}"] = slow_drip(0.5, 100)
    client = client_via(proxy, sandbox, builder["apiKey"], timeout=1.5)
    async with asyncio.timeout(OUTER):
        with pytest.raises(errors.RequestTimeout) as info:
            await client.get_plan(plan_id)
    assert info.value.code == "timeout" and info.value.status is None
    await client.aclose()


async def test_a_hung_service_uses_one_deadline_for_all_retries(
    proxy: FaultProxy, sandbox: SandboxServer, builder: dict[str, str], plan_id: str
) -> None:
    proxy.always[f"protocol/plans/{plan_id}"] = hang(60)
    client = client_via(proxy, sandbox, builder["apiKey"], timeout=1.0)
    async with asyncio.timeout(OUTER):
        with pytest.raises(errors.RequestTimeout):
            await client.get_plan(plan_id)
    assert proxy.calls[f"protocol/plans/{plan_id}"] == 1  # no second attempt past the deadline
    await client.aclose()


async def test_the_paid_path_budget_caps_calls_made_inside_it(
    proxy: FaultProxy, sandbox: SandboxServer, builder: dict[str, str], plan_id: str
) -> None:
    proxy.always[f"protocol/plans/{plan_id}"] = hang(60)
    client = client_via(proxy, sandbox, builder["apiKey"], timeout=60.0)
    async with asyncio.timeout(OUTER):
        with client.deadline(1.0), pytest.raises(errors.RequestTimeout):
            await client.get_plan(plan_id)
    await client.aclose()


async def test_dropped_connections_on_a_read_are_retried_over_real_http(
    proxy: FaultProxy, sandbox: SandboxServer, builder: dict[str, str], plan_id: str
) -> None:
    key = f"protocol/plans/{plan_id}"
    proxy.faults[key] = [drop(), reset_after_forward()]
    client = client_via(proxy, sandbox, builder["apiKey"], timeout=10.0)
    async with asyncio.timeout(OUTER):
        plan = await client.get_plan(plan_id)
    assert plan.id == plan_id and proxy.calls[key] == 3
    await client.aclose()


async def test_an_order_whose_answer_was_lost_is_not_repeated(
    proxy: FaultProxy,
    sandbox: SandboxServer,
    builder: dict[str, str],
    subscriber: dict[str, str],
    builder_client: ServiceClient,
) -> None:
    plan_id = await make_plan(builder_client, builder["address"], credits=5)
    key = f"protocol/plans/{plan_id}/order"
    proxy.faults[key] = [reset_after_forward()]
    client = client_via(proxy, sandbox, subscriber["apiKey"], timeout=10.0)
    async with asyncio.timeout(OUTER):
        with pytest.raises(errors.TransportError):
            await client.order_plan(plan_id)
        balance = await client.get_plan_balance(plan_id)
    assert proxy.calls[key] == 1 and balance.balance == 5  # bought once, not twice
    await client.aclose()
