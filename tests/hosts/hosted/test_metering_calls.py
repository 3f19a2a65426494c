"""The tool meter's call ids on the plugin loop (real sandbox behind it): a waiter for a call in
progress, a first run that is cancelled, calls without an id, the bounded memory of call ids,
a flow that brings its own settle store, and a meter that never sells prompts."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from svc_gateway.host import ToolCallContext
from svc_gateway.selling.flow.flow import PaidFlow
from svc_gateway.selling.state.settle_journal import SettleJournal
from svc_gateway.selling.ways_in import metering
from svc_gateway.selling.ways_in.metering import ToolMeter
from tests.conftest import HostFactory
from tests.hosts.hosted.test_metered_tools import GRANTED, balance, metering_plan, user_with_credits

pytestmark = pytest.mark.asyncio


async def hosted(make_host: HostFactory, builder: dict[str, str], builder_client: Any) -> Any:
    plan = await metering_plan(builder_client, builder["address"])
    gateway, handle = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan,
        meteredTools={"image_gen": 3},
        defaultSpendingLimitCents=1,
    )
    alice = await user_with_credits(gateway, "alice", plan)
    return gateway, handle, plan, alice


async def test_waiters_and_cancelled_first_runs(
    make_host: HostFactory, builder: dict[str, str], builder_client: Any
) -> None:
    gateway, handle, plan, alice = await hosted(make_host, builder, builder_client)
    meter: ToolMeter = handle.extras["meter"]
    ctx = ToolCallContext("image_gen", {"p": 1}, "same", gateway._caller("alice"))
    runs: list[int] = []

    async def scenario() -> list[Any]:
        gate = asyncio.Event()
        started = asyncio.Event()
        rerun = asyncio.Event()

        async def tool() -> dict[str, Any]:
            runs.append(1)
            started.set()
            if len(runs) == 2:
                rerun.set()
            await gate.wait()
            return {"image": len(runs)}

        first = asyncio.ensure_future(meter.meter(ctx, tool))
        await started.wait()
        waiter = asyncio.ensure_future(meter.meter(ctx, tool))
        await asyncio.sleep(0)
        waiter.cancel()  # the waiter is cancelled: the first run goes on
        with pytest.raises(asyncio.CancelledError):
            await waiter
        second_waiter = asyncio.ensure_future(meter.meter(ctx, tool))
        await asyncio.sleep(0)
        first.cancel()  # the first run is cancelled: its waiter runs the call itself
        with pytest.raises(asyncio.CancelledError):
            await first
        await rerun.wait()  # the waiter runs the call itself
        gate.set()
        return [await second_waiter, await meter.meter(ctx, tool)]

    results = await handle.runtime.run(scenario())
    assert results == [{"image": 2}, {"image": 2}] and len(runs) == 2
    assert await balance(builder_client, plan, alice) == GRANTED - 3  # one call charged


async def test_calls_without_an_id_and_the_bounded_memory(
    make_host: HostFactory,
    builder: dict[str, str],
    builder_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gateway, handle, plan, alice = await hosted(make_host, builder, builder_client)
    meter: ToolMeter = handle.extras["meter"]
    caller = gateway._caller("alice")
    monkeypatch.setattr(metering, "CALLS_KEPT", 1)

    async def tool() -> str:
        return "ok"

    async def scenario() -> list[Any]:
        out = [await meter.meter(ToolCallContext("image_gen", {}, "", caller), tool)]
        out.append(await meter.meter(ToolCallContext("image_gen", {}, "a", caller), tool))
        out.append(await meter.meter(ToolCallContext("image_gen", {}, "b", caller), tool))
        # "a" was forgotten (one call id kept): the host repeating it runs and pays again
        out.append(await meter.meter(ToolCallContext("image_gen", {}, "a", caller), tool))
        return out

    assert await handle.runtime.run(scenario()) == ["ok"] * 4
    assert await balance(builder_client, plan, alice) == GRANTED - 3 * 4  # each call paid


async def test_a_flow_with_its_own_store_and_no_prompts(
    make_host: HostFactory, builder: dict[str, str], builder_client: Any, tmp_path: Path
) -> None:
    gateway, handle, plan, alice = await hosted(make_host, builder, builder_client)

    async def scenario() -> Any:
        journal = await SettleJournal.open(tmp_path / "own.json")
        flow = PaidFlow(handle.core, queue=journal)  # no handler: it sells no prompts
        meter = ToolMeter(handle.core, flow, handle.accounts)

        async def tool() -> str:
            return "drawn"

        ctx = ToolCallContext("image_gen", {}, "x", gateway._caller("alice"))
        result = await meter.meter(ctx, tool)
        assert not hasattr(flow, "handler")  # it sells tool calls, not prompts
        await meter.aclose()
        return result, flow.settler.queue is journal

    assert await handle.runtime.run(scenario()) == ("drawn", True)
    assert await balance(builder_client, plan, alice) == GRANTED - 3
