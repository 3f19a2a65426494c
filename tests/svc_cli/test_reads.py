"""The other groups against the sandbox: agents, delegations, organizations and the template
address the pay-as-you-go helper reads from the service."""

from __future__ import annotations

import asyncio

from .conftest import Svc


async def test_agents_delegations_and_organizations_answer(
    profiles: Svc, builder: dict[str, str], subscriber: dict[str, str]
) -> None:
    svc = profiles
    both = await svc.json(
        "--profile", "builder", "agents", "register-agent-and-plan",
        "--agent-metadata", '{"name": "Both"}', "--agent-api", "{}",
        "--plan-metadata", '{"name": "Bundle"}',
        "--price-config", '{"isCrypto": true, "amounts": [], "receivers": []}',
        "--credits-config", '{"isRedemptionAmountFixed": true, "amount": "5", "minAmount": "1", '
        '"maxAmount": "1"}',
    )  # fmt: skip
    agent_id, plan_id = both["data"]["agentId"], both["data"]["planId"]
    created = await svc.json(
        "--profile", "subscriber", "delegation", "create-delegation",
        "--spending-limit-cents", "500", "--duration-secs", "600", "--max-transactions", "3",
    )  # fmt: skip
    mine, plans_of_agent, delegations, methods, memberships, payg, customer = await asyncio.gather(
        svc.ok("--profile", "builder", "agents", "get-agents"),
        svc.json("agents", "get-agent-plans", agent_id),
        svc.json("--profile", "subscriber", "delegation", "list-delegations"),
        svc.ok("--profile", "subscriber", "delegation", "list-payment-methods"),
        svc.json("--profile", "builder", "organizations", "get-my-memberships"),
        svc.json(
            "plans", "get-pay-as-you-go-price-config", "--amount", "100",
            "--receiver", builder["address"],
        ),
        svc.ok("--profile", "builder", "organizations", "onboard-customer",
               "--email", "c1@example.com"),
    )  # fmt: skip
    assert agent_id in mine.out and "Both" in mine.out
    assert [p["id"] for p in plans_of_agent["plans"]] == [plan_id]
    assert [d["delegationId"] for d in delegations] == [created["delegationId"]]
    assert "card" in methods.out and subscriber["address"] in methods.out
    assert memberships[0]["role"] == "Admin"
    assert payg["templateAddress"] != "0x" + "0" * 40  # read from the service's deployment info
    assert "hidden: use --format json" in customer.out  # a new account's key, never in a table
