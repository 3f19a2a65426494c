"""Every tool through the reference host, against the local sandbox over real HTTP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from svc_gateway.encoding import decode_access_token, token_authorization
from svc_gateway.host import ToolResult
from svc_gateway.sandbox import SandboxServer
from svc_gateway.service.client import ServiceClient
from tests.conftest import HostFactory, make_plan

pytestmark = pytest.mark.asyncio


def ok(result: ToolResult) -> dict[str, Any]:
    assert not result.isError, result.structuredContent
    return result.structuredContent


def err(result: ToolResult, code: str | None = None) -> dict[str, Any]:
    assert result.isError, result.structuredContent
    error = result.structuredContent["error"]
    assert error["message"] and error["hint"]
    if code is not None:
        assert error["code"] == code, error
    return dict(error)


async def test_every_tool_is_registered_with_a_described_schema(make_host: HostFactory) -> None:
    gateway, _ = await make_host()
    assert len(gateway.tools) == 9
    for spec in gateway.tools.values():
        assert spec.parameters["type"] == "object"
        for name, prop in spec.parameters["properties"].items():
            assert prop.get("description"), f"{spec.name}.{name} has no description"


async def test_logged_out_tools_say_how_to_log_in(make_host: HostFactory, plan_id: str) -> None:
    gateway, _ = await make_host()
    for name, params in [
        ("svc_checkBalance", {"planId": plan_id}),
        ("svc_getAccessToken", {"planId": plan_id}),
        ("svc_orderPlan", {"planId": plan_id, "confirm": True}),
        ("svc_listPaymentMethods", {}),
        ("svc_listPlans", {}),
        ("svc_createPlan", {"name": "x", "creditsAmount": 5, "priceAmounts": "0"}),
    ]:
        error = err(await gateway.call_tool(name, params), "not_logged_in")
        assert "/svc_login" in error["hint"]


async def test_check_balance(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id)
    data = ok(await gateway.call_tool("svc_checkBalance", {}))
    assert data == {
        "planId": plan_id,
        "planName": "Starter",
        "address": subscriber["address"],
        "balance": "0",
        "isSubscriber": False,
    }
    unknown = err(await gateway.call_tool("svc_checkBalance", {"planId": "424242"}))
    assert "not" in unknown["message"].lower()
    bad = err(await gateway.call_tool("svc_checkBalance", {"address": "0x12"}), "invalid_params")
    assert "address" in bad["message"]
    typo = err(await gateway.call_tool("svc_checkBalance", {"plan": plan_id}), "invalid_params")
    assert "plan" in typo["message"]


async def test_missing_plan_is_an_error_with_a_hint(
    make_host: HostFactory, subscriber: dict[str, str]
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    for name in ("svc_checkBalance", "svc_orderPlan", "svc_getAccessToken", "svc_orderFiatPlan"):
        error = err(await gateway.call_tool(name, {}), "missing_plan_id")
        assert "planId" in error["hint"]


async def test_order_plan_quotes_then_buys(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id)
    quote = ok(await gateway.call_tool("svc_orderPlan", {}))
    assert quote["confirmRequired"] is True
    assert quote["quote"]["planName"] == "Starter"
    assert quote["quote"]["credits"] == "100"
    assert quote["quote"]["environment"] == "local"
    assert "confirm: true" in quote["message"]
    assert ok(await gateway.call_tool("svc_checkBalance", {}))["balance"] == "0"
    bought = ok(await gateway.call_tool("svc_orderPlan", {"confirm": True}))
    assert bought["ordered"] is True and bought["balance"] == "100"
    assert bought["txHash"].startswith("0x")
    balance = ok(await gateway.call_tool("svc_checkBalance", {}))
    assert balance["balance"] == "100" and balance["isSubscriber"] is True


async def test_order_plan_failures(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    fiat_plan = await make_plan(builder_client, builder["address"], fiat=True)
    error = err(await gateway.call_tool("svc_orderPlan", {"planId": fiat_plan}), "fiat_plan")
    assert "svc_orderFiatPlan" in error["hint"]
    err(await gateway.call_tool("svc_orderPlan", {"planId": "999999", "confirm": True}))
    trial = await make_plan(builder_client, builder["address"], trial=True)
    ok(await gateway.call_tool("svc_orderPlan", {"planId": trial, "confirm": True}))
    again = err(await gateway.call_tool("svc_orderPlan", {"planId": trial, "confirm": True}))
    assert "trial" in (again["message"] + again["hint"]).lower()
    assert ok(await gateway.call_tool("svc_checkBalance", {"planId": trial}))["balance"] == "100"


async def test_order_fiat_plan_returns_a_checkout_that_grants_credits(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
    plan_id: str,
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    fiat_plan = await make_plan(builder_client, builder["address"], fiat=True, credits=40)
    quote = ok(await gateway.call_tool("svc_orderFiatPlan", {"planId": fiat_plan}))
    assert quote["quote"]["price"] == "$2.00"
    data = ok(await gateway.call_tool("svc_orderFiatPlan", {"planId": fiat_plan, "confirm": True}))
    assert data["checkoutUrl"].startswith("http://127.0.0.1")
    async with httpx.AsyncClient() as http:
        assert (await http.get(data["checkoutUrl"])).status_code == 200
    balance = ok(await gateway.call_tool("svc_checkBalance", {"planId": fiat_plan}))
    assert balance["balance"] == "40"
    error = err(await gateway.call_tool("svc_orderFiatPlan", {"planId": plan_id}), "crypto_plan")
    assert "svc_orderPlan" in error["hint"]


async def test_access_token_crypto_reuses_one_delegation(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str, sandbox: SandboxServer
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id)
    first = ok(await gateway.call_tool("svc_getAccessToken", {}))
    second = ok(await gateway.call_tool("svc_getAccessToken", {}))
    assert first["scheme"] == "svc:erc4337" and first["network"] == "eip155:84532"
    decoded = decode_access_token(first["accessToken"])
    assert decoded is not None
    auth = token_authorization(decoded)
    assert auth["from"] == subscriber["address"] and auth["planId"] == plan_id
    client = ServiceClient(sandbox.base_url, subscriber["apiKey"])
    delegations = await client._request("GET", "delegation")
    await client.aclose()
    listed = delegations if isinstance(delegations, list) else delegations["delegations"]
    assert len(listed) == 1  # the sandbox lists bare (Python SDK) or wrapped (TypeScript)
    assert (
        token_authorization(decode_access_token(second["accessToken"]) or {})["delegationId"]
        == auth["delegationId"]
    )


async def test_access_token_fiat_uses_card_delegation(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    fiat_plan = await make_plan(builder_client, builder["address"], fiat=True)
    data = ok(
        await gateway.call_tool("svc_getAccessToken", {"planId": fiat_plan, "paymentType": "fiat"})
    )
    assert data["scheme"] == "svc:card-delegation"
    wrong_card = err(
        await gateway.call_tool(
            "svc_getAccessToken",
            {"planId": fiat_plan, "paymentType": "fiat", "paymentMethodId": "pm_nope"},
        ),
        "payment_method_not_found",
    )
    assert "svc_listPaymentMethods" in wrong_card["hint"]
    # no paymentType: the plan's own kind decides (issue 7: it used to fail with no useful hint)
    inferred = ok(await gateway.call_tool("svc_getAccessToken", {"planId": fiat_plan}))
    assert inferred["scheme"] == "svc:card-delegation"
    mismatch = err(
        await gateway.call_tool(
            "svc_getAccessToken", {"planId": fiat_plan, "paymentType": "crypto"}
        ),
        "payment_type_mismatch",
    )
    assert "paymentType: fiat" in mismatch["hint"]


async def test_list_payment_methods(make_host: HostFactory, subscriber: dict[str, str]) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    data = ok(await gateway.call_tool("svc_listPaymentMethods", {}))
    assert data["count"] == 2  # the sandbox's Stripe and Braintree test cards
    assert [c["provider"] for c in data["cards"]] == ["stripe", "braintree"]
    card = data["cards"][0]
    assert (card["brand"], card["last4"], card["expiry"]) == ("visa", "4242", "12/2030")
    err(await gateway.call_tool("svc_listPaymentMethods", {"extra": 1}), "invalid_params")


async def test_register_agent_sets_defaults_and_converts_prices(
    make_host: HostFactory, builder: dict[str, str], sandbox: SandboxServer
) -> None:
    gateway, handle = await make_host(builder["apiKey"])
    data = ok(
        await gateway.call_tool(
            "svc_registerAgent",
            {
                "name": "Echo",
                "agentUrl": "http://127.0.0.1:9/svc/agent",
                "planName": "Echo credits",
                "priceAmounts": "$1.50",
                "creditsAmount": 10,
                "tokenAddress": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            },
        )
    )
    assert data["price"] == "1.5 USDC" and data["priceAmounts"] == ["1500000"]
    assert handle.core.agent_id == data["agentId"] and handle.core.plan_id == data["planId"]
    client = ServiceClient(sandbox.base_url)
    plan = await client.get_plan(data["planId"])
    agent = await client.get_agent(data["agentId"])
    await client.aclose()
    assert plan.registry.price.receivers == [builder["address"]]
    assert plan.registry.credits.min_amount == plan.registry.credits.max_amount == 1
    assert data["planId"] in agent.registry.plans
    # the default plan is now the new one
    assert ok(await gateway.call_tool("svc_checkBalance", {}))["planId"] == data["planId"]
    native = ok(
        await gateway.call_tool(
            "svc_registerAgent",
            {
                "name": "Native",
                "agentUrl": "http://127.0.0.1:9/a",
                "planName": "n",
                "priceAmounts": ["1", str(2 * 10**18)],
                "priceReceivers": [builder["address"], builder["address"]],
                "creditsAmount": 5,
            },
        )
    )
    assert native["priceAmounts"] == ["1", str(2 * 10**18)]
    assert native["price"] == "2.000000000000000001 ETH (native token, 18 decimals)"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"priceAmounts": "abc"}, "$1,000.00"),
        ({"priceAmounts": "$1.0000001"}, "decimal"),
        ({"priceReceivers": ["0xnope"]}, "0xnope"),
        ({"agentUrl": "ftp://x"}, "agentUrl"),
        ({"creditsAmount": 0}, "creditsAmount"),
        ({"tokenAddress": "0x1"}, "tokenAddress"),
    ],
)
async def test_register_agent_bad_params(
    make_host: HostFactory, builder: dict[str, str], params: dict[str, Any], field: str
) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    base = {
        "name": "A",
        "agentUrl": "http://127.0.0.1:9/a",
        "planName": "p",
        "priceAmounts": "1000000",
        "creditsAmount": 5,
        "tokenAddress": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    }
    error = err(await gateway.call_tool("svc_registerAgent", {**base, **params}), "invalid_params")
    assert field in error["message"]


async def test_create_plan_kinds(
    make_host: HostFactory, builder: dict[str, str], sandbox: SandboxServer
) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    credits = ok(
        await gateway.call_tool(
            "svc_createPlan",
            {
                "name": "C",
                "creditsAmount": 50,
                "priceAmounts": "$3",
                "tokenAddress": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            },
        )
    )
    assert credits["price"] == "3 USDC" and credits["priceAmounts"] == ["3000000"]
    time_plan = ok(
        await gateway.call_tool(
            "svc_createPlan",
            {
                "name": "T",
                "planType": "time",
                "durationSecs": 2592000,
                "priceAmounts": "$5",
                "paymentType": "fiat",
            },
        )
    )
    assert time_plan["credits"]["durationSecs"] == "2592000"
    assert time_plan["credits"]["amount"] == time_plan["credits"]["maxAmount"] == "1"
    assert time_plan["isCrypto"] is False
    trial = ok(
        await gateway.call_tool(
            "svc_createPlan", {"name": "Tr", "creditsAmount": 3, "trial": True, "priceAmounts": "0"}
        )
    )
    dynamic = ok(
        await gateway.call_tool(
            "svc_createPlan",
            {
                "name": "D",
                "creditsAmount": 30,
                "priceAmounts": "0",
                "minCreditsPerRequest": 1,
                "maxCreditsPerRequest": 5,
            },
        )
    )
    client = ServiceClient(sandbox.base_url)
    assert (await client.get_plan(trial["planId"])).is_trial
    assert (await client.get_plan(time_plan["planId"])).is_time_plan
    d = await client.get_plan(dynamic["planId"])
    assert (d.registry.credits.min_amount, d.registry.credits.max_amount) == (1, 5)
    await client.aclose()


async def test_create_plan_errors(make_host: HostFactory, builder: dict[str, str]) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    low = err(
        await gateway.call_tool(
            "svc_createPlan",
            {"name": "F", "creditsAmount": 5, "priceAmounts": "$0.50", "paymentType": "fiat"},
        )
    )
    assert "1.00" in low["message"]
    missing = err(
        await gateway.call_tool("svc_createPlan", {"name": "X", "priceAmounts": "0"}),
        "invalid_params",
    )
    assert "creditsAmount" in missing["message"]
    no_duration = err(
        await gateway.call_tool(
            "svc_createPlan", {"name": "X", "planType": "time", "priceAmounts": "0"}
        ),
        "invalid_params",
    )
    assert "durationSecs" in no_duration["message"]


async def test_access_limit_is_enforced(
    make_host: HostFactory, builder: dict[str, str], subscriber: dict[str, str]
) -> None:
    owner, _ = await make_host(builder["apiKey"])
    created = await owner.call_tool(
        "svc_createPlan",
        {"name": "Limited", "creditsAmount": 5, "accessLimit": 1, "priceAmounts": "0"},
    )
    if created.isError:  # the SDK-faithful client refuses: the service has no order limit
        assert err(created, "order_limit_unsupported")["hint"]
        assert ok(await owner.call_tool("svc_listPlans", {}))["total"] == 0
        return
    plan = ok(created)["planId"]
    buyer, _ = await make_host(subscriber["apiKey"])
    ok(await buyer.call_tool("svc_orderPlan", {"planId": plan, "confirm": True}))
    sold_out = err(await buyer.call_tool("svc_orderPlan", {"planId": plan, "confirm": True}))
    assert sold_out["code"] != "internal_error"
    assert ok(await buyer.call_tool("svc_checkBalance", {"planId": plan}))["balance"] == "5"


async def test_list_plans_paginates(make_host: HostFactory, builder: dict[str, str]) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    for i in range(3):
        ok(
            await gateway.call_tool(
                "svc_createPlan", {"name": f"P{i}", "creditsAmount": 5, "priceAmounts": "0"}
            )
        )
    first = ok(
        await gateway.call_tool(
            "svc_listPlans", {"pageSize": 2, "sortBy": "name", "sortOrder": "asc"}
        )
    )
    second = ok(
        await gateway.call_tool(
            "svc_listPlans", {"pageSize": 2, "page": 2, "sortBy": "name", "sortOrder": "asc"}
        )
    )
    assert first["total"] == 3 and first["pages"] == 2
    assert [p["name"] for p in first["plans"] + second["plans"]] == ["P0", "P1", "P2"]
    err(await gateway.call_tool("svc_listPlans", {"pageSize": 1000}), "invalid_params")
