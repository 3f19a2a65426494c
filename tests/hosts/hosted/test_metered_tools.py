"""Metered host tools through the host contract (``around_tool_call``), against the sandbox.

Each test names one money rule: charged exactly per successful call, never for a failed or
blocked one, blocked with a price when short, exact under concurrency, queued on an outage; and
each ends with conservation (granted = balance + burned) checked on the service's balances.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
import pytest

from svc_gateway.host import ToolResult
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import PlanMetadata
from svc_gateway.service.pricing import crypto_price, dynamic_credits
from tests.conftest import USDC, CountingTransport, HostFactory
from tests.hosts.hosted.test_user_wallets import address_in
from tests.tools.test_tools import ok

pytestmark = pytest.mark.asyncio

GRANTED = 12


async def metering_plan(client: ServiceClient, owner: str, granted: int = GRANTED) -> str:
    """A plan whose credits per call range 1..10, so each tool's own price is charged."""
    return await client.register_plan(
        PlanMetadata(name="Tools"),
        crypto_price([1_000_000], [owner], USDC),
        dynamic_credits(granted, 1, 10),
    )


class Tools:
    """Host tools that count their runs."""

    def __init__(self, gateway: ReferenceGateway) -> None:
        self.runs: dict[str, int] = {}
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()
        for name in ("image_gen", "search_web", "flaky", "broken", "free_tool"):
            gateway.add_host_tool(name, self._tool(name))

    def _tool(self, name: str) -> Any:
        async def run(arguments: dict[str, Any]) -> Any:
            self.runs[name] = self.runs.get(name, 0) + 1
            self.started.set()
            if self.gate is not None:
                await self.gate.wait()
            if name == "flaky":
                return ToolResult.error("upstream_down", "the image service is down", "retry")
            if name == "broken":
                raise RuntimeError("tool bug")
            return {"tool": name, "arguments": arguments}

        return run


def code_of(result: Any) -> str:
    assert isinstance(result, ToolResult) and result.isError, result
    return str(result.structuredContent["error"]["code"])


async def balance(client: ServiceClient, plan: str, holder: str) -> int:
    return (await client.get_plan_balance(plan, holder)).balance


async def user_with_credits(gateway: ReferenceGateway, name: str, plan: str) -> str:
    opened = await gateway.run_command("svc_login", "new", sender=name)
    assert "account is open" in opened, opened
    if not plan:
        return address_in(opened)
    ok(await gateway.call_tool("svc_orderPlan", {"planId": plan, "confirm": True}, sender=name))
    result = ok(await gateway.call_tool("svc_checkBalance", {"planId": plan}, sender=name))
    return str(result["address"]).lower()


@pytest.fixture
async def setup(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> Any:
    async def build(transport: Any = None) -> tuple[ReferenceGateway, Any, Tools, str]:
        plan = await metering_plan(builder_client, builder["address"])
        gateway, handle = await make_host(
            builder["apiKey"],
            transport=transport,
            perUserAccounts=True,
            planId=plan,
            meteredTools={"image_gen": 3, "search_*": 1, "flaky": 2, "broken": 2},
            # no automatic top-up: the delegation a token is minted from cannot buy the plan
            defaultSpendingLimitCents=1,
        )
        return gateway, handle, Tools(gateway), plan

    return build


async def test_charged_exactly_per_successful_call_and_never_twice_for_one_call_id(
    setup: Any, builder_client: ServiceClient
) -> None:
    gateway, handle, tools, plan = await setup()
    alice = await user_with_credits(gateway, "alice", plan)
    result = await gateway.call_host_tool(
        "image_gen", {"prompt": "cat"}, sender="alice", call_id="call-1"
    )
    assert result == {"tool": "image_gen", "arguments": {"prompt": "cat"}}
    assert await balance(builder_client, plan, alice) == GRANTED - 3
    # the host retries the same call: answered from the first run, not run or charged again
    again = await gateway.call_host_tool(
        "image_gen", {"prompt": "cat"}, sender="alice", call_id="call-1"
    )
    assert again == result and tools.runs["image_gen"] == 1
    assert await balance(builder_client, plan, alice) == GRANTED - 3
    # a tool not in meteredTools is free and never touches the service
    assert (await gateway.call_host_tool("free_tool", {}, sender="alice"))["tool"] == "free_tool"
    await gateway.call_host_tool("search_web", {"q": "x"}, sender="alice")
    assert await balance(builder_client, plan, alice) == GRANTED - 4
    meter = handle.extras["meter"]
    assert meter.flow.stats.settled == 2 and meter.flow.stats.credits_settled == 4
    # conservation: granted = balance + burned
    assert await balance(builder_client, plan, alice) + meter.flow.stats.credits_settled == GRANTED


async def test_a_failed_tool_is_never_charged(setup: Any, builder_client: ServiceClient) -> None:
    gateway, handle, tools, plan = await setup()
    alice = await user_with_credits(gateway, "alice", plan)
    failed = await gateway.call_host_tool("flaky", {}, sender="alice")
    assert isinstance(failed, ToolResult) and failed.isError
    error = failed.structuredContent["error"]
    assert error["code"] == "tool_failed" and "upstream_down" in error["message"]  # its own code
    broke = await gateway.call_host_tool("broken", {}, sender="alice")
    assert code_of(broke) == "tool_failed"  # the host gets the failure, its type and message
    assert "RuntimeError: tool bug" in broke.structuredContent["error"]["message"]
    assert tools.runs == {"flaky": 1, "broken": 1}
    assert await balance(builder_client, plan, alice) == GRANTED
    assert handle.extras["meter"].flow.stats.settled == 0


async def test_blocked_with_price_balance_and_how_to_buy_when_short(
    setup: Any, builder_client: ServiceClient
) -> None:
    gateway, _, tools, plan = await setup()
    bob = await user_with_credits(gateway, "bob", "")  # an account, but no credits
    blocked = await gateway.call_host_tool("image_gen", {"prompt": "x"}, sender="bob")
    assert isinstance(blocked, ToolResult) and blocked.isError
    error = blocked.structuredContent["error"]
    assert error["code"] == "insufficient_credits"
    assert (error["price"], error["balance"], error["planId"]) == (3, 0, plan)
    assert "3 credits" in error["message"] and "did not run" in error["message"]
    assert "svc_orderPlan" in error["hint"]
    # a user with no account at all is told how to get one; the tool never runs
    nobody = await gateway.call_host_tool("image_gen", {}, sender="carol")
    assert nobody.structuredContent["error"]["code"] == "not_logged_in"
    assert "/svc_login new" in nobody.structuredContent["error"]["hint"]
    assert tools.runs == {}
    assert await balance(builder_client, plan, bob) == 0
    # the same call id, retried once bob has credits: a blocked call never ran, so it runs now
    first = await gateway.call_host_tool("image_gen", {}, sender="bob", call_id="retry-1")
    assert code_of(first) == "insufficient_credits"
    ok(await gateway.call_tool("svc_orderPlan", {"planId": plan, "confirm": True}, sender="bob"))
    again = await gateway.call_host_tool("image_gen", {}, sender="bob", call_id="retry-1")
    assert again["tool"] == "image_gen" and tools.runs == {"image_gen": 1}
    assert await balance(builder_client, plan, bob) == GRANTED - 3


async def test_exact_under_20_parallel_calls_with_credits_for_12(
    setup: Any, builder_client: ServiceClient
) -> None:
    gateway, handle, tools, plan = await setup()
    alice = await user_with_credits(gateway, "alice", plan)
    results = await asyncio.gather(
        *(gateway.call_host_tool("search_web", {"i": i}, sender="alice") for i in range(20))
    )
    served = [r for r in results if isinstance(r, dict)]
    blocked = [r for r in results if isinstance(r, ToolResult)]
    assert len(served) == GRANTED and len(blocked) == 20 - GRANTED
    assert all(b.structuredContent["error"]["code"] == "insufficient_credits" for b in blocked)
    assert tools.runs["search_web"] == GRANTED  # a blocked call never ran
    assert await balance(builder_client, plan, alice) == 0
    stats = handle.extras["meter"].flow.stats
    assert stats.credits_settled == GRANTED  # granted = balance (0) + burned


class SettleOutage(CountingTransport):
    """The service cannot be reached for settles while ``down`` (a fault on demand)."""

    down = True

    async def before(self, method: str, path: str) -> None:
        if self.down and path.endswith("/x402/settle"):
            raise aiohttp.ClientConnectionError("settle unreachable")


async def test_a_settle_outage_queues_the_settle_and_the_retry_charges_once(
    setup: Any, builder_client: ServiceClient
) -> None:
    transport = SettleOutage()
    gateway, handle, _tools, plan = await setup(transport)
    meter = handle.extras["meter"]
    meter.flow.settler.backoff = (0.0,)
    alice = await user_with_credits(gateway, "alice", plan)
    result = await gateway.call_host_tool("image_gen", {"prompt": "x"}, sender="alice")
    assert result["tool"] == "image_gen"  # delivered: the answer exists, per SPEC
    assert await balance(builder_client, plan, alice) == GRANTED  # not settled yet
    assert await handle.runtime.run(meter.flow.settler.queue.count()) == 1
    earnings = await gateway.run_command("svc_earnings")
    assert "3 queued" in earnings
    assert "queued" in await gateway.run_command("svc_spend", sender="alice")
    transport.down = False
    tried = transport.count("POST", "/x402/settle")
    assert await handle.runtime.run(meter.flow.settler.drain_queue()) == 1
    assert await handle.runtime.run(meter.flow.settler.drain_queue()) == 0  # never twice
    assert transport.count("POST", "/x402/settle") == tried + 1
    assert await balance(builder_client, plan, alice) == GRANTED - 3
    assert "3 settled, 0 queued, 0 lost" in await gateway.run_command("svc_earnings")
    assert await balance(builder_client, plan, alice) + meter.flow.stats.credits_settled == GRANTED


async def test_the_svc_tools_are_never_metered() -> None:
    from svc_gateway.selling.ways_in.metering import ToolMeter

    meter = ToolMeter.__new__(ToolMeter)
    meter.prices = {"*": 1}
    assert meter.price_of("svc_checkBalance") is None
    assert meter.price_of("anything") == 1


async def test_a_call_id_reused_by_another_user_is_their_own_call(
    setup: Any, builder_client: ServiceClient
) -> None:
    """Call ids repeat across users and turns (a model may restart its count): one user's
    result is never handed to another, who is charged (or blocked) for their own call."""
    gateway, _, tools, plan = await setup()
    alice = await user_with_credits(gateway, "alice", plan)
    bob = await user_with_credits(gateway, "bob", plan)
    mine = await gateway.call_host_tool("image_gen", {"p": 1}, sender="alice", call_id="call_0")
    theirs = await gateway.call_host_tool("image_gen", {"p": 1}, sender="bob", call_id="call_0")
    assert mine == theirs and tools.runs["image_gen"] == 2  # each ran their own call
    assert await balance(builder_client, plan, alice) == GRANTED - 3
    assert await balance(builder_client, plan, bob) == GRANTED - 3
    spend = await gateway.run_command("svc_spend", sender="bob")
    assert "You paid 3 credits (0.25 USD) for 1 call " in spend and "tool image_gen" in spend
    assert "Only the gateway's operator" in await gateway.run_command("svc_earnings", sender="bob")
    earnings = await gateway.run_command("svc_earnings")
    for payer in (alice, bob):
        assert f"{payer}: 1 sale, 3 settled, 0 queued, 0 lost" in earnings.lower()


async def test_a_delegation_that_can_top_up_pays_for_the_call(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    """A user with no credits whose token's delegation can buy the plan (the service's automatic
    top-up) is served: the settle buys the plan once, within the delegation's limit, then burns
    the call's price (granted = balance + burned)."""
    plan = await metering_plan(builder_client, builder["address"])
    gateway, handle = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan,
        meteredTools={"image_gen": 3},
        defaultSpendingLimitCents=150,  # one purchase of the 1 USDC plan, not two
    )
    tools = Tools(gateway)
    dana = await user_with_credits(gateway, "dana", "")
    served = await gateway.call_host_tool("image_gen", {}, sender="dana")
    assert served["tool"] == "image_gen" and tools.runs == {"image_gen": 1}
    assert await balance(builder_client, plan, dana) == GRANTED - 3
    assert handle.extras["meter"].flow.stats.credits_settled == 3


async def test_spend_and_earnings_agree_with_the_services_balances(
    setup: Any, builder_client: ServiceClient
) -> None:
    gateway, _, _tools, plan = await setup()
    payers = {name: await user_with_credits(gateway, name, plan) for name in ("ann", "ben")}
    for name, tool in (("ann", "image_gen"), ("ann", "search_web"), ("ben", "image_gen")):
        await gateway.call_host_tool(tool, {}, sender=name)
    await gateway.call_host_tool("flaky", {}, sender="ben")  # failed: not charged, not listed
    earnings = (await gateway.run_command("svc_earnings")).lower()
    total = 0
    for name, address in payers.items():
        burned = GRANTED - await balance(builder_client, plan, address)  # the service's figure
        total += burned
        row = re.search(rf"{address}: (\d+) sales?, (\d+) settled, 0 queued, 0 lost", earnings)
        assert row is not None and int(row.group(2)) == burned, earnings
        spend = await gateway.run_command("svc_spend", sender=name)
        assert f"You paid {burned} credits" in spend
    assert earnings.startswith(f"earned {total} credits settled, 0 queued")
    assert total == 7
