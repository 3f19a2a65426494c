"""Issue 25 on a hosted gateway: a metered tool runs only within the user's own mandate or once
they approved the call with its code; another user's code approves nothing; no silent top-up.
Over loopback against the sandbox, the service's balances as truth."""

from __future__ import annotations

from typing import Any

import pytest

from svc_gateway.host import ToolResult
from svc_gateway.service.client import ServiceClient
from tests.conftest import HostFactory
from tests.helpers import approve
from tests.hosts.hosted.test_metered_tools import GRANTED, Tools, balance, metering_plan

pytestmark = pytest.mark.asyncio


async def hosted_human(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> tuple[Any, Any, Tools, str]:
    plan = await metering_plan(builder_client, builder["address"])
    gateway, handle = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan,
        meteredTools={"image_gen": 3},
        approval="human",
        maxUserSpendPerDay=0.3,
    )
    return gateway, handle, Tools(gateway), plan


async def user_who_approved_credits(gateway: Any, name: str, plan: str) -> str:
    opened = await gateway.run_command("svc_login", "new", sender=name)
    assert "account is open" in opened, opened
    pending = await gateway.call_tool(
        "svc_orderPlan", {"planId": plan, "confirm": True}, sender=name
    )
    code = pending.structuredContent["pending"]["code"]
    assert (await approve(gateway, code, sender=name)).startswith("Approved")
    result = await gateway.call_tool("svc_checkBalance", {"planId": plan}, sender=name)
    return str(result.structuredContent["address"]).lower()


async def test_a_metered_call_runs_once_approved_by_its_own_user_or_within_a_mandate(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    gateway, handle, tools, plan = await hosted_human(make_host, builder, builder_client)
    alice = await user_who_approved_credits(gateway, "alice", plan)
    await gateway.run_command("svc_login", "new", sender="bob")
    asked = await gateway.call_host_tool("image_gen", {"p": "cat"}, sender="alice")
    assert isinstance(asked, ToolResult) and asked.isError
    error = asked.structuredContent["error"]
    assert error["code"] == "approval_required" and "image_gen" not in tools.runs
    code = error["pending"]["code"]
    assert (await approve(gateway, code, sender="bob")).startswith("No pending")
    assert await balance(builder_client, plan, alice) == GRANTED
    assert (await approve(gateway, code, sender="alice")).startswith("Approved")
    ran = await gateway.call_host_tool("image_gen", {"p": "cat"}, sender="alice")
    assert ran == {"tool": "image_gen", "arguments": {"p": "cat"}}
    assert await balance(builder_client, plan, alice) == GRANTED - 3
    again = await gateway.call_host_tool("image_gen", {"p": "cat"}, sender="alice")
    assert again.structuredContent["error"]["code"] == "approval_required"  # approved once
    # a mandate of its own user: 3 credits of a 1 USDC / 12 credit plan are 0.25 USD; the
    # operator's cap (0.30 USD a day) lets one call through, not two
    reply = await gateway.run_command("svc_allow", "1 USD per day", sender="alice")
    assert reply.startswith("Allowed") and "caps every user at 0.30 USD" in reply
    first = await gateway.call_host_tool("image_gen", {"p": "dog"}, sender="alice")
    assert first == {"tool": "image_gen", "arguments": {"p": "dog"}}
    capped = await gateway.call_host_tool("image_gen", {"p": "owl"}, sender="alice")
    assert capped.structuredContent["error"]["code"] == "approval_required"
    assert await balance(builder_client, plan, alice) == GRANTED - 6
    assert tools.runs["image_gen"] == 2
    meter = handle.extras["meter"]
    assert await balance(builder_client, plan, alice) + meter.flow.stats.credits_settled == GRANTED


async def test_an_approved_metered_call_runs_only_with_the_arguments_approved(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    """Issue 41: the person approved ``image_gen {"p": "cat"}``; the model calling it with
    other arguments gets a new code and runs nothing; the approved call then runs once."""
    gateway, handle, tools, plan = await hosted_human(make_host, builder, builder_client)
    alice = await user_who_approved_credits(gateway, "alice", plan)
    asked = await gateway.call_host_tool("image_gen", {"p": "cat"}, sender="alice")
    assert isinstance(asked, ToolResult)
    code = asked.structuredContent["error"]["pending"]["code"]
    assert (await approve(gateway, code, sender="alice")).startswith("Approved once")
    other = await gateway.call_host_tool("image_gen", {"p": "a whole zoo"}, sender="alice")
    assert isinstance(other, ToolResult)
    assert other.structuredContent["error"]["code"] == "approval_required"
    assert other.structuredContent["error"]["pending"]["code"] != code
    assert "image_gen" not in tools.runs and await balance(builder_client, plan, alice) == GRANTED
    ran = await gateway.call_host_tool("image_gen", {"p": "cat"}, sender="alice")
    assert ran == {"tool": "image_gen", "arguments": {"p": "cat"}}
    meter = handle.extras["meter"]
    assert await balance(builder_client, plan, alice) == GRANTED - 3
    assert await balance(builder_client, plan, alice) + meter.flow.stats.credits_settled == GRANTED


async def test_a_metered_call_that_would_buy_the_plan_says_so_in_its_code(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    """Issue 41: a user holding no credits is asked for a code whose summary names the top-up
    (the plan bought first): the person sees that the call would buy the plan."""
    gateway, _handle, tools, _plan = await hosted_human(make_host, builder, builder_client)
    await gateway.run_command("svc_login", "new", sender="carol")
    asked = await gateway.call_host_tool("image_gen", {"p": "cat"}, sender="carol")
    assert isinstance(asked, ToolResult) and asked.isError
    error = asked.structuredContent["error"]
    assert error["code"] == "approval_required" and "buying the plan first" in error["message"]
    assert "image_gen" not in tools.runs


async def test_an_approved_call_that_buys_the_plan_first_then_runs(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    """Issue 44: a user holding no credits and no mandate approves the call's code, which
    names the plan's purchase and its price; the approved call then runs (the top-up buys the
    plan, one call's credits are burned), instead of answering "insufficient_credits"."""
    gateway, handle, tools, plan = await hosted_human(make_host, builder, builder_client)
    await gateway.run_command("svc_login", "new", sender="carol")
    asked = await gateway.call_host_tool("image_gen", {"p": "cat"}, sender="carol")
    assert isinstance(asked, ToolResult) and asked.isError
    error = asked.structuredContent["error"]
    assert "buying the plan first" in error["message"] and "1.25 USD" in error["message"]
    approved = await approve(gateway, error["pending"]["code"], sender="carol")
    assert approved.startswith("Approved once") and "buying the plan first" in approved
    ran = await gateway.call_host_tool("image_gen", {"p": "cat"}, sender="carol")
    # the person sees that the call bought the plan, in money and credits, beside its result
    notice = ran.pop("svcNotice")
    assert ran == {"tool": "image_gen", "arguments": {"p": "cat"}}, ran
    assert notice == (
        f"Paid by you: image_gen bought plan {plan} first (automatic top-up: 12 credits for "
        "1.00 USD, within the code you approved for it), then used 3 credits (0.25 USD). "
        "/svc_spend lists both."
    )
    address = (
        await gateway.call_tool("svc_checkBalance", {"planId": plan}, sender="carol")
    ).structuredContent["address"]
    assert await balance(builder_client, plan, str(address).lower()) == GRANTED - 3
    assert tools.runs["image_gen"] == 1
    assert handle.extras["meter"].flow.stats.credits_settled == 3


async def test_an_approved_call_the_balance_no_longer_pays_says_what_else_it_needs(
    make_host: HostFactory, builder: dict[str, str], builder_client: ServiceClient
) -> None:
    """Issue 44: the code was asked while the user held the credits (no purchase in it); the
    credits are spent before the person approves; the approved call does not run, and its
    answer says plainly that the approval covered the credits only and what to do next."""
    plan = await metering_plan(builder_client, builder["address"])
    gateway, _handle = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan,
        meteredTools={"image_gen": 3},
        approval="human",
    )
    tools = Tools(gateway)
    alice = await user_who_approved_credits(gateway, "alice", plan)
    asked = await gateway.call_host_tool("image_gen", {"p": "cat"}, sender="alice")
    assert isinstance(asked, ToolResult) and "buying the plan" not in asked.text
    code = asked.structuredContent["error"]["pending"]["code"]
    assert (await gateway.run_command("svc_allow", "1 USD total", sender="alice")).startswith(
        "Allowed"
    )
    for n in range(GRANTED // 3):  # spend every credit within the mandate
        ran = await gateway.call_host_tool("image_gen", {"p": f"dog {n}"}, sender="alice")
        assert ran == {"tool": "image_gen", "arguments": {"p": f"dog {n}"}}, ran
    assert await balance(builder_client, plan, alice) == 0
    assert (await approve(gateway, code, sender="alice")).startswith("Approved once")
    short = await gateway.call_host_tool("image_gen", {"p": "cat"}, sender="alice")
    assert isinstance(short, ToolResult) and short.isError
    error = short.structuredContent["error"]
    assert error["code"] == "insufficient_credits"
    assert "approved this call, but it still cannot be paid" in error["message"]
    assert "covered the call's credits only" in error["message"]
    assert "new code names what it needs now" in error["hint"]
    assert (
        tools.runs["image_gen"] == GRANTED // 3 and await balance(builder_client, plan, alice) == 0
    )
