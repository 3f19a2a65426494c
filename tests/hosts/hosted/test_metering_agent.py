"""Metered host tools with and without ``agentId`` configured (the ``keepInConfig`` hint after
``svc_registerAgent`` advises it), and a payment refused for a reason that is not the balance:
never reported as "insufficient credits". Against the sandbox over loopback; each test ends
with conservation (granted = balance + burned)."""

from __future__ import annotations

from typing import Any

import pytest

from svc_gateway.sandbox import SandboxServer
from svc_gateway.sandbox.context import STORE
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import AgentApi, AgentMetadata
from tests.conftest import HostFactory
from tests.hosts.hosted.test_metered_tools import (
    GRANTED,
    Tools,
    balance,
    code_of,
    metering_plan,
    user_with_credits,
)

pytestmark = pytest.mark.asyncio


async def metered_gateway(
    make_host: HostFactory, builder: dict[str, str], client: ServiceClient, with_agent: bool
) -> tuple[Any, Any, Tools, str]:
    plan = await metering_plan(client, builder["address"])
    config: dict[str, Any] = {}
    if with_agent:  # the paid endpoint's agent sells the plan and has endpoints of its own
        api = AgentApi(endpoints=[{"POST": "http://127.0.0.1:9/ask"}])
        config["agentId"] = await client.register_agent(AgentMetadata(name="A"), api, [plan])
    gateway, handle = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan,
        meteredTools={"image_gen": 3},
        defaultSpendingLimitCents=1,  # no automatic top-up
        **config,
    )
    return gateway, handle, Tools(gateway), plan


@pytest.mark.parametrize("with_agent", [False, True], ids=["no-agentId", "agentId"])
async def test_metering_charges_the_same_with_and_without_an_agent_id(
    make_host: HostFactory,
    builder: dict[str, str],
    builder_client: ServiceClient,
    with_agent: bool,
) -> None:
    gateway, handle, tools, plan = await metered_gateway(
        make_host, builder, builder_client, with_agent
    )
    alice = await user_with_credits(gateway, "alice", plan)
    for i in range(2):
        result = await gateway.call_host_tool("image_gen", {"i": i}, sender="alice")
        assert result == {"tool": "image_gen", "arguments": {"i": i}}
    assert tools.runs == {"image_gen": 2}
    stats = handle.extras["meter"].flow.stats
    assert stats.settled == 2 and stats.credits_settled == 6
    # conservation: granted = balance + burned
    assert await balance(builder_client, plan, alice) + stats.credits_settled == GRANTED


@pytest.mark.parametrize("with_agent", [False, True], ids=["no-agentId", "agentId"])
async def test_a_refusal_that_is_not_the_balance_is_never_insufficient_credits(
    make_host: HostFactory,
    sandbox: SandboxServer,
    builder: dict[str, str],
    builder_client: ServiceClient,
    with_agent: bool,
) -> None:
    """The payer's delegation can pay no more transactions: verify refuses a payer who holds
    credits enough. The block says what happened and shows the balance, not a shortage."""
    gateway, handle, tools, plan = await metered_gateway(
        make_host, builder, builder_client, with_agent
    )
    alice = await user_with_credits(gateway, "alice", plan)
    await gateway.call_host_tool("image_gen", {}, sender="alice")
    store = sandbox.app[STORE]
    store.run(
        "UPDATE delegations SET max_transactions = transaction_count WHERE owner = ?", (alice,)
    )
    refused = await gateway.call_host_tool("image_gen", {}, sender="alice")
    assert code_of(refused) == "payment_refused"
    error = refused.structuredContent["error"]
    assert error["balance"] == GRANTED - 3 and error["price"] == 3
    assert "maxTransactions" in error["reason"] and "insufficient" not in str(error).lower()
    assert tools.runs == {"image_gen": 1}  # refused: the tool never ran
    # a real shortage is still one: bob holds no credits
    await user_with_credits(gateway, "bob", "")
    short = await gateway.call_host_tool("image_gen", {}, sender="bob")
    assert code_of(short) == "insufficient_credits"
    assert short.structuredContent["error"]["balance"] == 0
    stats = handle.extras["meter"].flow.stats
    assert await balance(builder_client, plan, alice) + stats.credits_settled == GRANTED
