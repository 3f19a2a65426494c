"""The metered-tool adapter's other paths, each against the sandbox over loopback: price
functions, no plan, a fiat plan's way to buy, an outage at verify, a settle the service refuses
(result withheld), a bug in metering, a cancelled call, and the same-loop host."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from svc_gateway.host import ToolCallContext, ToolResult
from svc_gateway.selling.ways_in.metering import ToolMeter
from svc_gateway.selling.ways_in.tool_results import HostToolError, default_failed
from svc_gateway.service.client import ServiceClient
from tests.conftest import CountingTransport, HostFactory, make_plan
from tests.hosts.hosted.test_metered_tools import (
    GRANTED,
    Tools,
    balance,
    metering_plan,
    user_with_credits,
)

pytestmark = pytest.mark.asyncio


def code(result: Any) -> str:
    assert isinstance(result, ToolResult) and result.isError, result
    return str(result.structuredContent["error"]["code"])


async def test_price_functions_set_the_credits_and_a_bad_price_blocks(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    plan = await metering_plan(builder_client, builder["address"])
    gateway, _ = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan,
        meteredTools={
            "image_gen": "tests.hosts.hosted.prices:by_size",
            "search_*": "tests.hosts.hosted.prices:async_two",
        },
    )
    tools = Tools(gateway)
    alice = await user_with_credits(gateway, "alice", plan)
    await gateway.call_host_tool("image_gen", {"size": 4}, sender="alice")
    await gateway.call_host_tool("search_web", {}, sender="alice")
    assert await balance(builder_client, plan, alice) == GRANTED - 6
    for bad in (0, "3", True):
        blocked = await gateway.call_host_tool("image_gen", {"size": bad}, sender="alice")
        assert code(blocked) == "price_unavailable"
    assert tools.runs == {"image_gen": 1, "search_web": 1}


async def test_no_plan_blocks_and_a_fiat_plan_points_to_its_checkout(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    gateway, _ = await make_host(
        builder["apiKey"], perUserAccounts=True, meteredTools={"image_gen": 1}
    )
    tools = Tools(gateway)
    await user_with_credits(gateway, "alice", "")
    assert code(await gateway.call_host_tool("image_gen", {}, sender="alice")) == (
        "metering_not_configured"
    )
    fiat = await make_plan(builder_client, builder["address"], fiat=True, credits=5)
    gateway2, _ = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        meteringPlanId=fiat,
        meteredTools={"image_gen": 1},
        defaultSpendingLimitCents=1,  # the card delegation cannot buy the plan (no top-up)
    )
    Tools(gateway2)
    await user_with_credits(gateway2, "bob", "")
    short = await gateway2.call_host_tool("image_gen", {}, sender="bob")
    assert code(short) == "insufficient_credits"
    assert "svc_orderFiatPlan" in short.structuredContent["error"]["hint"]
    # an unknown plan: minting is refused; the block says so, with the balance unknown (no
    # balance says the payer is short, so it is not "insufficient credits")
    gateway3, _ = await make_host(
        builder["apiKey"], perUserAccounts=True, planId="999999", meteredTools={"image_gen": 1}
    )
    Tools(gateway3)
    await user_with_credits(gateway3, "carol", "")
    unknown = await gateway3.call_host_tool("image_gen", {}, sender="carol")
    assert code(unknown) == "payment_refused"
    assert unknown.structuredContent["error"]["balance"] is None
    assert tools.runs == {}


class VerifyOutage(CountingTransport):
    async def before(self, method: str, path: str) -> None:
        if path.endswith("/x402/verify"):
            raise aiohttp.ClientConnectionError("verify unreachable")


async def test_an_outage_at_verify_blocks_uncharged(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    plan = await metering_plan(builder_client, builder["address"])
    gateway, _ = await make_host(
        builder["apiKey"],
        transport=VerifyOutage(),
        perUserAccounts=True,
        planId=plan,
        meteredTools={"image_gen": 3},
    )
    tools = Tools(gateway)
    alice = await user_with_credits(gateway, "alice", plan)
    assert code(await gateway.call_host_tool("image_gen", {}, sender="alice")) == (
        "metering_unavailable"
    )
    assert tools.runs == {} and await balance(builder_client, plan, alice) == GRANTED


async def test_a_settle_the_service_refuses_withholds_the_result(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    """The payer spends their credits elsewhere while the tool runs: settle is refused, the
    result is withheld, nothing is burned twice (granted = balance + burned)."""
    plan = await metering_plan(builder_client, builder["address"])
    gateway, handle = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan,
        meteredTools={"image_gen": 10},
        defaultSpendingLimitCents=1,  # the token's delegation cannot top the balance up
    )
    assert handle.accounts is not None
    alice = await user_with_credits(gateway, "alice", plan)
    user = handle.accounts.core_for(gateway._caller("alice"))
    assert user.session is not None
    elsewhere = ServiceClient(gateway.plugin_config["baseUrl"], user.session.key.secret)
    burned: list[int] = []

    async def spend_elsewhere(arguments: dict[str, Any]) -> dict[str, Any]:
        from svc_gateway.service.models import Accept, PaymentRequirement, Resource

        token = await elsewhere.get_access_token(plan)
        envelope = PaymentRequirement(
            resource=Resource(url="https://elsewhere.example/x"),
            accepts=[Accept(scheme="svc:erc4337", network="eip155:84532", plan_id=plan)],
        )
        result = await builder_client.settle(envelope, token, 5, None)
        burned.append(int(result.receipt()["creditsRedeemed"]))
        return {"image": "done"}

    gateway.add_host_tool("image_gen", spend_elsewhere)
    try:
        withheld = await gateway.call_host_tool("image_gen", {}, sender="alice")
    finally:
        await elsewhere.aclose()
    assert code(withheld) == "payment_refused"
    assert "withheld" in withheld.structuredContent["error"]["message"]
    left = await balance(builder_client, plan, alice)
    assert left == GRANTED - sum(burned) == 7
    assert "lost" not in await gateway.run_command("svc_spend", sender="alice")


async def test_a_metering_bug_blocks_and_a_cancelled_call_can_be_retried(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    plan = await metering_plan(builder_client, builder["address"])
    gateway, handle = await make_host(
        builder["apiKey"], perUserAccounts=True, planId=plan, meteredTools={"image_gen": 3}
    )
    tools = Tools(gateway)
    alice = await user_with_credits(gateway, "alice", plan)
    meter: ToolMeter = handle.extras["meter"]
    real_facts = meter.flow.facts

    async def broken_facts(plan_id: str) -> Any:
        raise RuntimeError("bug")

    meter.flow.facts = broken_facts  # type: ignore[method-assign]
    assert code(await gateway.call_host_tool("image_gen", {}, sender="alice")) == (
        "metering_failed"
    )
    meter.flow.facts = real_facts  # type: ignore[method-assign]
    tools.gate = asyncio.Event()
    tools.started = asyncio.Event()
    call = asyncio.ensure_future(
        gateway.call_host_tool("image_gen", {}, sender="alice", call_id="c-1")
    )
    await tools.started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    tools.gate.set()
    again = await gateway.call_host_tool("image_gen", {}, sender="alice", call_id="c-1")
    assert again["tool"] == "image_gen" and tools.runs["image_gen"] == 2
    assert await balance(builder_client, plan, alice) == GRANTED - 3  # charged once


async def test_a_tool_over_its_deadline_is_cut_off_uncharged(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    plan = await metering_plan(builder_client, builder["address"])
    gateway, _ = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan,
        meteredTools={"image_gen": 3},
        handlerTimeoutSecs=0.2,
    )
    tools = Tools(gateway)
    tools.gate = asyncio.Event()  # never set: the tool hangs
    alice = await user_with_credits(gateway, "alice", plan)
    late = await gateway.call_host_tool("image_gen", {}, sender="alice")
    assert code(late) == "tool_timeout" and tools.runs == {"image_gen": 1}
    assert await balance(builder_client, plan, alice) == GRANTED


async def test_a_host_on_the_plugin_loop_and_the_failure_test(
    make_host: HostFactory,
    builder: dict[str, str],
    builder_client: ServiceClient,
    tmp_path: Path,
) -> None:
    plan = await metering_plan(builder_client, builder["address"])
    gateway, handle = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan,
        meteredTools={"image_gen": 3},
        settleQueuePath=str(tmp_path / "queue.json"),
    )
    alice = await user_with_credits(gateway, "alice", plan)
    meter: ToolMeter = handle.extras["meter"]
    assert meter.queue_path().name == "queue.tools.json"
    ctx = ToolCallContext("image_gen", {}, "on-loop", gateway._caller("alice"))

    async def tool() -> str:
        return '{"image": "x"}'

    result = await handle.runtime.run(meter(ctx, tool))  # the host runs on the plugin loop
    assert result == '{"image": "x"}'
    assert await balance(builder_client, plan, alice) == GRANTED - 3
    # only the host's error channel is a failure, never the content (the user's own output)
    assert not default_failed('{"error": "x"}') and not default_failed({"error": "x"})
    assert default_failed(ToolResult.error("a", "b", "c")) and default_failed(HostToolError("x"))
