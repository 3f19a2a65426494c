"""Order tools, word for word: the wrong order tool names the right one, the smallest price
still counts as paid, and a quote names the plan and whether it is a trial (issue 11, mutation
run of tools)."""

from __future__ import annotations

from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import PlanMetadata
from svc_gateway.service.pricing import crypto_price, fixed_credits
from tests.conftest import USDC, HostFactory, make_plan
from tests.tools.test_tools import err, ok


async def test_the_wrong_order_tool_names_the_right_one(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
) -> None:
    crypto = await make_plan(builder_client, builder["address"], name="Coins")
    card = await make_plan(builder_client, builder["address"], name="Cards", fiat=True)
    gateway, _ = await make_host(subscriber["apiKey"])
    by_card = err(await gateway.call_tool("svc_orderFiatPlan", {"planId": crypto}), "crypto_plan")
    assert (by_card["message"], by_card["hint"]) == (
        'Plan "Coins" is paid in crypto',
        "Use svc_orderPlan for this plan.",
    )
    in_crypto = err(await gateway.call_tool("svc_orderPlan", {"planId": card}), "fiat_plan")
    assert (in_crypto["message"], in_crypto["hint"]) == (
        'Plan "Cards" is paid by card',
        "Use svc_orderFiatPlan for this plan.",
    )


async def test_a_plan_priced_one_base_unit_is_paid_not_free(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
) -> None:
    tiny = await builder_client.register_plan(
        PlanMetadata(name="Tiny"),
        crypto_price([1], [builder["address"]], USDC),
        fixed_credits(5, 1),
    )
    gateway, _ = await make_host(subscriber["apiKey"])
    err(await gateway.call_tool("svc_orderFiatPlan", {"planId": tiny}), "crypto_plan")


async def test_a_quote_names_the_plan_and_whether_it_is_a_trial(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
    plan_id: str,
) -> None:
    trial = await make_plan(builder_client, builder["address"], trial=True)
    gateway, _ = await make_host(subscriber["apiKey"])
    paid = ok(await gateway.call_tool("svc_orderPlan", {"planId": plan_id}))["quote"]
    assert paid["planId"] == plan_id and paid["trial"] is False
    free = ok(await gateway.call_tool("svc_orderPlan", {"planId": trial}))["quote"]
    assert free["planId"] == trial and free["trial"] is True
