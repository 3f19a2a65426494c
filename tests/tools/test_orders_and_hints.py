"""Issue 7 and 11: only JSON ``true`` confirms an order, every order refreshes the balance
context, and error answers speak to a chat user (no REST paths, hints that point the right
way)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from svc_gateway.service.client import ServiceClient
from svc_gateway.service.errors import InvalidRequest, NotFound, ServiceError
from svc_gateway.service.models import AgentApi, AgentMetadata
from svc_gateway.tools.base import for_chat
from tests.conftest import HostFactory, make_plan
from tests.helpers import fake_key
from tests.tools.test_tools import err, ok

API_SPEAK = ("POST /", "GET /", "/api/v1", "/protocol/", "/x402/")


def speaks_to_a_chat_user(error: dict[str, Any]) -> bool:
    text = error["message"] + " " + error["hint"]
    return not any(marker in text for marker in API_SPEAK)


@pytest.mark.parametrize("tool", ["svc_orderPlan", "svc_orderFiatPlan"])
@pytest.mark.parametrize("confirm", ["yes", 1, "on", "true", "True", 1.0, [True], {"v": True}])
async def test_only_json_true_confirms_an_order(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
    tool: str,
    confirm: object,
) -> None:
    plan = await make_plan(builder_client, builder["address"], fiat=tool == "svc_orderFiatPlan")
    gateway, _ = await make_host(subscriber["apiKey"])
    quote = ok(await gateway.call_tool(tool, {"planId": plan, "confirm": confirm}))
    assert quote["confirmRequired"] is True and quote["quote"]["planId"] == plan
    assert quote["message"].startswith(
        "Nothing was bought: confirm must be JSON true, without quotes, to buy (confirm was "
    )
    balance = ok(await gateway.call_tool("svc_checkBalance", {"planId": plan}))
    assert balance["balance"] == "0" and balance["isSubscriber"] is False


async def test_false_quotes_and_true_buys(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    quote = ok(await gateway.call_tool("svc_orderPlan", {"planId": plan_id, "confirm": False}))
    assert quote["confirmRequired"] is True and quote["quote"]["price"] == "1 USDC"
    assert ok(await gateway.call_tool("svc_checkBalance", {"planId": plan_id}))["balance"] == "0"
    bought = ok(await gateway.call_tool("svc_orderPlan", {"planId": plan_id, "confirm": True}))
    assert bought["balance"] == "100" and bought["price"] == "1 USDC"


async def test_a_fiat_quote_opens_no_checkout(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
) -> None:
    fiat_plan = await make_plan(builder_client, builder["address"], fiat=True)
    gateway, _ = await make_host(subscriber["apiKey"])
    for params in ({"planId": fiat_plan}, {"planId": fiat_plan, "confirm": False}):
        quote = ok(await gateway.call_tool("svc_orderFiatPlan", params))
        assert quote["confirmRequired"] is True and "checkoutUrl" not in quote
        assert "Nothing was bought" in quote["message"]
    bought = ok(
        await gateway.call_tool("svc_orderFiatPlan", {"planId": fiat_plan, "confirm": True})
    )
    assert bought["checkoutUrl"].startswith("http://127.0.0.1")
    assert bought["price"] == "$2.00"


async def test_a_crypto_order_refreshes_the_balance_context(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id)
    assert ": 0 credits" in await gateway.context_text()
    ok(await gateway.call_tool("svc_orderPlan", {"confirm": True}))
    # within the 60 s TTL: only the invalidation after ordering explains the new number
    assert ": 100 credits" in await gateway.context_text()


async def test_a_fiat_order_refreshes_the_balance_context(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
) -> None:
    """Issue 11: "no balance-cache invalidation after svc_orderFiatPlan" survived the suite."""
    fiat_plan = await make_plan(builder_client, builder["address"], fiat=True, credits=40)
    gateway, _ = await make_host(subscriber["apiKey"], planId=fiat_plan, paymentType="fiat")
    assert ": 0 credits" in await gateway.context_text()
    data = ok(await gateway.call_tool("svc_orderFiatPlan", {"confirm": True}))
    async with httpx.AsyncClient() as http:  # the user pays at the checkout
        assert (await http.get(data["checkoutUrl"])).status_code == 200
    assert ": 40 credits" in await gateway.context_text()


async def test_an_invalid_key_answer_speaks_to_a_chat_user(
    make_host: HostFactory, plan_id: str
) -> None:
    gateway, _ = await make_host(svcApiKey=fake_key("local"))
    error = err(await gateway.call_tool("svc_listPlans", {}))
    assert speaks_to_a_chat_user(error), error
    assert "/svc_login" in error["hint"]


async def test_a_wrong_plan_for_an_agent_answers_without_api_paths(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
) -> None:
    sold = await make_plan(builder_client, builder["address"], name="Sold")
    other = await make_plan(builder_client, builder["address"], name="Other")
    agent = await builder_client.register_agent(
        AgentMetadata(name="A"), AgentApi(endpoints=[{"POST": "http://127.0.0.1:9/a"}]), [sold]
    )
    gateway, _ = await make_host(subscriber["apiKey"])
    error = err(await gateway.call_tool("svc_getAccessToken", {"planId": other, "agentId": agent}))
    assert speaks_to_a_chat_user(error), error
    assert "planId" in error["hint"]


async def test_a_card_paid_plan_hint_says_pass_payment_type_fiat(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
) -> None:
    fiat_plan = await make_plan(builder_client, builder["address"], fiat=True)
    gateway, _ = await make_host(subscriber["apiKey"], paymentType="crypto")
    token = ok(await gateway.call_tool("svc_getAccessToken", {"planId": fiat_plan}))
    assert token["scheme"] == "svc:card-delegation"  # the plan's kind wins over config
    error = err(
        await gateway.call_tool(
            "svc_getAccessToken", {"planId": fiat_plan, "paymentType": "crypto"}
        ),
        "payment_type_mismatch",
    )
    assert "paymentType: fiat" in error["hint"]


def test_for_chat_strips_rest_paths_and_keeps_the_rest() -> None:
    aside = InvalidRequest(
        "Agent 7 does not sell plan 9 (GET /protocol/agents/{id}/plans)",
        code="BCK.OTHER",
        hint="Ask for a token via POST /api/v1/x402/permissions",
    )
    message, hint = for_chat(aside)
    assert message == "Agent 7 does not sell plan 9"
    assert hint == InvalidRequest.default_hint
    bare = NotFound("see GET /protocol/plans/9", code="X", hint="GET /protocol/plans lists them")
    message, hint = for_chat(bare)
    assert message == "The service refused the request (X)" and hint == NotFound.default_hint

    class RestMinded(ServiceError):
        default_hint = "GET /meta/versions lists them"

    for status, expected in ((404, "svc_listPlans"), (401, "/svc_login"), (None, "Fix what")):
        odd = RestMinded("bad version", status=status, code="Y", hint="GET /meta/versions")
        assert expected in for_chat(odd)[1]
    plain = ServiceError("Plan not found", code="Z", hint="Check the id.")
    assert for_chat(plain) == ("Plan not found", "Check the id.")
    known = ServiceError("x", code="BCK.X402.0035", hint="Fiat plans take svc:card-delegation")
    assert "paymentType: fiat" in for_chat(known)[1]


async def test_quotes_for_time_and_free_plans(
    make_host: HostFactory, builder: dict[str, str], subscriber: dict[str, str]
) -> None:
    owner, _ = await make_host(builder["apiKey"])
    timed = ok(
        await owner.call_tool(
            "svc_createPlan",
            {
                "name": "Month",
                "planType": "time",
                "durationSecs": 2592000,
                "priceAmounts": "$5",
                "paymentType": "fiat",
            },
        )
    )["planId"]
    free = ok(
        await owner.call_tool(
            "svc_createPlan", {"name": "Free", "creditsAmount": 3, "priceAmounts": "0"}
        )
    )["planId"]
    buyer, _ = await make_host(subscriber["apiKey"])
    quote = ok(await buyer.call_tool("svc_orderFiatPlan", {"planId": timed}))["quote"]
    assert quote["grants"] == "access for 2592000 s" and quote["price"] == "$5.00"
    for tool in ("svc_orderPlan", "svc_orderFiatPlan"):  # a free plan is neither kind
        free_quote = ok(await buyer.call_tool(tool, {"planId": free}))["quote"]
        assert free_quote["price"] == "free" and free_quote["grants"] == "3 credits"


async def test_a_quote_says_what_automatic_top_up_means_for_a_buyer(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    """Issue 15: a delegation-backed token may buy the plan at settle; the quote says so and
    names what bounds it."""
    gateway, _ = await make_host(subscriber["apiKey"])
    quote = ok(await gateway.call_tool("svc_orderPlan", {"planId": plan_id}))
    assert quote["topUp"] == (
        "Paying for a query can also buy this plan: a token backed by a delegation may order "
        "it at settle when credits run short (automatic top-up), charged to the delegation and "
        "bounded by its spending limit (defaultSpendingLimitCents)."
    )
