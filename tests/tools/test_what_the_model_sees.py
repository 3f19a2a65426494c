"""Issue 14: what the model and the user see from the tools and the context."""

from __future__ import annotations

from datetime import UTC, datetime

from svc_gateway.encoding import decode_access_token, token_authorization
from svc_gateway.service.client import ServiceClient
from tests.conftest import HostFactory, make_plan
from tests.tools.test_tools import err, ok


async def test_ids_sent_as_numbers_are_read_as_decimal_text(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    data = ok(await gateway.call_tool("svc_checkBalance", {"planId": int(plan_id)}))
    assert data["planId"] == plan_id and data["balance"] == "0"
    quote = ok(await gateway.call_tool("svc_orderPlan", {"planId": int(plan_id)}))
    assert quote["quote"]["planId"] == plan_id


async def test_an_unknown_field_gets_a_did_you_mean(
    make_host: HostFactory, builder: dict[str, str]
) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    error = err(
        await gateway.call_tool(
            "svc_createPlan", {"name": "X", "creditsAmount": 5, "priceAmount": "0"}
        ),
        "invalid_params",
    )
    assert "priceAmount: unknown field; did you mean priceAmounts?" in error["message"]
    odd = err(await gateway.call_tool("svc_checkBalance", {"zzz": 1}), "invalid_params")
    assert "zzz: unknown field (the fields are: planId, address)" in odd["message"]
    case = err(await gateway.call_tool("svc_checkBalance", {"PLANID": "1"}), "invalid_params")
    assert "did you mean planId?" in case["message"]


async def test_an_unknown_tool_points_to_tools(make_host: HostFactory) -> None:
    gateway, _ = await make_host()
    line = await gateway.handle_line('svc_buyPlan {"planId": "1"}')
    assert line is not None and "Type /tools to list the tools" in line
    result = await gateway.call_tool("svc_buyPlan", {})
    assert "/tools" in result.structuredContent["error"]["hint"]


async def test_plans_need_an_explicit_price(
    make_host: HostFactory, builder: dict[str, str]
) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    for tool, params in [
        ("svc_createPlan", {"name": "X", "creditsAmount": 5}),
        (
            "svc_registerAgent",
            {"name": "A", "agentUrl": "https://a.example/x", "planName": "P", "creditsAmount": 5},
        ),
    ]:
        error = err(await gateway.call_tool(tool, params), "invalid_params")
        assert 'priceAmounts: required: the price (for a free plan give "0"' in error["message"]
    assert ok(await gateway.call_tool("svc_listPlans", {}))["total"] == 0
    free = ok(
        await gateway.call_tool(
            "svc_createPlan", {"name": "Free", "creditsAmount": 5, "priceAmounts": "0"}
        )
    )
    assert free["price"] == "free"


async def test_the_access_token_shows_its_real_expiry(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    ok(await gateway.call_tool("svc_orderPlan", {"planId": plan_id, "confirm": True}))
    data = ok(await gateway.call_tool("svc_getAccessToken", {"planId": plan_id}))
    decoded = decode_access_token(data["accessToken"]) or {}
    valid_before = int(token_authorization(decoded)["validBefore"])
    expected = datetime.fromtimestamp(valid_before, tz=UTC).isoformat().replace("+00:00", "Z")
    assert data["expiresAt"] == expected
    assert datetime.fromisoformat(data["expiresAt"]) > datetime.now(tz=UTC)


async def test_list_plans_with_none_says_it_lists_plans_you_own(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    ok(await gateway.call_tool("svc_orderPlan", {"planId": plan_id, "confirm": True}))
    data = ok(await gateway.call_tool("svc_listPlans", {}))
    assert data["plans"] == [] and "lists the plans you own" in data["message"]
    assert "svc_checkBalance" in data["message"]


async def test_plans_bought_this_session_appear_in_the_context(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder_client: ServiceClient,
    builder: dict[str, str],
) -> None:
    plan = await make_plan(builder_client, builder["address"], name="Bought here")
    gateway, _ = await make_host(subscriber["apiKey"])  # no planId in the config
    assert await gateway.context_text() == ""
    ok(await gateway.call_tool("svc_orderPlan", {"planId": plan, "confirm": True}))
    text = await gateway.context_text()
    assert f'- "Bought here" (plan {plan}): 100 credits, subscribed' in text
    await gateway.run_command("svc_logout")
    await gateway.run_command("svc_login", subscriber["apiKey"])
    assert plan not in await gateway.context_text()  # a new session starts empty


async def test_logged_out_the_context_mentions_svc_login_once(make_host: HostFactory) -> None:
    gateway, _ = await make_host()
    first = await gateway.context_text()
    assert "not logged in" in first and "/svc_login" in first
    assert await gateway.context_text() == ""
    assert await gateway.context_text() == ""


async def test_the_quote_shows_the_balance_already_held(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    first = ok(await gateway.call_tool("svc_orderPlan", {"planId": plan_id}))
    assert first["quote"]["balanceHeld"] == "0" and first["quote"]["subscribed"] is False
    assert "already hold" not in first["message"]
    ok(await gateway.call_tool("svc_orderPlan", {"planId": plan_id, "confirm": True}))
    again = ok(await gateway.call_tool("svc_orderPlan", {"planId": plan_id, "confirm": "yes"}))
    assert again["quote"]["balanceHeld"] == "100" and again["quote"]["subscribed"] is True
    assert "You already hold 100 credits on this plan." in again["message"]
    assert again["message"].startswith("Nothing was bought: confirm must be JSON true")
    balance = ok(await gateway.call_tool("svc_checkBalance", {"planId": plan_id}))
    assert balance["balance"] == "100"


async def test_a_quote_still_comes_when_the_balance_cannot_be_read(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    import aiohttp

    from tests.conftest import CountingTransport

    class NoBalance(CountingTransport):
        async def before(self, method: str, path: str) -> None:
            if "/balance/" in path:
                raise aiohttp.ClientConnectionError("balance service down")

    gateway, _ = await make_host(subscriber["apiKey"], transport=NoBalance())
    quote = ok(await gateway.call_tool("svc_orderPlan", {"planId": plan_id}))
    assert quote["confirmRequired"] is True and "balanceHeld" not in quote["quote"]
    assert (
        quote["message"]
        == "Nothing was bought. To buy, call svc_orderPlan again with confirm: true."
    )


async def test_a_time_plan_quote_says_access_is_active(
    make_host: HostFactory, builder: dict[str, str], subscriber: dict[str, str]
) -> None:
    owner, _ = await make_host(builder["apiKey"])
    plan = ok(
        await owner.call_tool(
            "svc_createPlan",
            {"name": "Day", "planType": "time", "durationSecs": 86400, "priceAmounts": "0"},
        )
    )["planId"]
    buyer, _ = await make_host(subscriber["apiKey"])
    ok(await buyer.call_tool("svc_orderPlan", {"planId": plan, "confirm": True}))
    again = ok(await buyer.call_tool("svc_orderPlan", {"planId": plan}))
    assert again["message"].endswith("You already have active access on this plan.")
