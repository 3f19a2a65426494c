"""Issue 7, prices: what a bare number means, dollars with thousands separators, dollars on the
native token refused with the USDC address, and every price shown with its unit, formatted by
the plugin's own code."""

from __future__ import annotations

from typing import Any

import pytest

from svc_gateway.service.models import Plan
from svc_gateway.service.pricing import (
    USDC_ADDRESSES,
    PriceError,
    crypto_price,
    dynamic_credits,
    erc20_price,
    expirable_credits,
    fiat_price,
    fixed_credits,
    format_price,
    free_price,
    native_price,
    parse_amounts,
    split_amounts,
    to_minor_units,
)
from svc_gateway.tools import TOOLS
from svc_gateway.tools.subscriber import describe_price
from tests.conftest import USDC, HostFactory
from tests.tools.test_tools import err, ok

ETH = "(native token, 18 decimals)"


@pytest.mark.parametrize(
    ("text", "decimals", "expected"),
    [
        ("$1,000.00", 6, 1_000_000_000),
        ("$1,000", 6, 1_000_000_000),
        ("$12,345,678.9", 6, 12_345_678_900_000),
        ("$ 1.50", 6, 1_500_000),
        ("$.25", 6, 250_000),
        ("$0", 6, 0),
        ("1500000", 6, 1_500_000),
        (" 42 ", 18, 42),
        (7, 6, 7),
        ("$2", 18, 2 * 10**18),
    ],
)
def test_to_minor_units(text: str | int, decimals: int, expected: int) -> None:
    assert to_minor_units(text, decimals) == expected


@pytest.mark.parametrize(
    "text", ["$1,0000", "$1,00.00", "$1e3", "$NaN", "$-1", "1.5", "1,5x", "abc", "١٢", "$"]
)
def test_a_bad_price_names_the_expected_format(text: str) -> None:
    with pytest.raises(PriceError) as error:
        parse_amounts(text, 6)
    message = str(error.value)
    assert "$1,000.00" in message or "ambiguous" in message or "decimal" in message, message


def test_bad_types_and_sizes_are_price_errors() -> None:
    for value in (True, 1.5, None, {"a": 1}, -1, 2**256, "9" * 100):
        with pytest.raises(PriceError):
            parse_amounts(value, 6)
    with pytest.raises(PriceError, match="at least one"):
        parse_amounts([], 6)
    with pytest.raises(PriceError, match="decimal places"):
        to_minor_units("$1.0000001", 6)


def test_commas_separate_prices_except_inside_a_dollar_amount() -> None:
    assert split_amounts("$1,000.00") == ["$1,000.00"]
    assert split_amounts("$1,000.00, $2") == ["$1,000.00", "$2"]
    assert split_amounts("1000000,2000000") == ["1000000", "2000000"]
    assert split_amounts(" 5 , ,6") == ["5", "6"]
    assert parse_amounts("$1,000.00,$2", 6) == [1_000_000_000, 2_000_000]
    with pytest.raises(PriceError, match="ambiguous"):
        parse_amounts("$1,0000", 6)  # one price, or $1 and 0? refused, not guessed


@pytest.mark.parametrize(
    ("amounts", "crypto", "token", "currency", "text"),
    [
        ([], True, None, None, "free"),
        ([0, 0], False, None, "usd", "free"),
        ([2_000_000], False, None, None, "$2.00"),
        ([1_234_500_000], False, None, "USD", "$1,234.50"),
        ([1_000_000, 500_000], False, None, "eur", "€1.50"),
        ([1_000_001], False, None, "usd", "$1.000001"),
        ([3_000_000], False, None, "gbp", "3.00 GBP"),
        ([1_500_000], True, USDC, None, "1.5 USDC"),
        ([1_000_000_000_000], True, USDC.lower(), None, "1,000,000 USDC"),
        ([1_000_000], True, None, None, f"0.000000000001 ETH {ETH}"),
        ([10**18], True, "0x" + "0" * 40, None, f"1 ETH {ETH}"),
        ([5], True, "0x808456652fdb597867f38412077a9182bf77359f", None, "0.000005 EURC"),
        ([7_000_000], True, "0x" + "12" * 20, None, "7 units of token 0x" + "12" * 20),
    ],
)
def test_format_price(
    amounts: list[int], crypto: bool, token: str | None, currency: str | None, text: str
) -> None:
    assert format_price(amounts, is_crypto=crypto, token_address=token, currency=currency) == text


def test_the_quote_text_is_the_plugins_not_the_services() -> None:
    plan = Plan.model_validate(
        {
            "id": "1",
            "metadata": {"main": {"name": "P", "price": "SERVICE TEXT"}, "plan": {}},
            "registry": {
                "price": {"isCrypto": True, "amounts": ["2500000"], "tokenAddress": USDC},
                "credits": {"amount": "10"},
            },
        }
    )
    assert describe_price(plan) == "2.5 USDC"


def test_descriptions_say_what_a_bare_number_means() -> None:
    for name in ("svc_createPlan", "svc_registerAgent"):
        schema = TOOLS[name].schema()["properties"]
        amounts = schema["priceAmounts"]["description"]
        assert "1000000 = $1.00" in amounts and "1000000 = 1 USDC" in amounts
        assert "native token" in amounts and "18 decimals" in amounts
        assert "$1,000.00" in amounts
        assert "native token" in schema["tokenAddress"]["description"]


async def test_no_token_address_means_the_native_token_and_says_so(
    make_host: HostFactory, builder: dict[str, str]
) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    data = ok(
        await gateway.call_tool(
            "svc_createPlan", {"name": "No token", "priceAmounts": 1000000, "creditsAmount": 10}
        )
    )
    assert data["price"] == f"0.000000000001 ETH {ETH}"
    assert data["priceAmounts"] == ["1000000"]
    listed = ok(await gateway.call_tool("svc_listPlans", {}))["plans"]
    assert [p["price"] for p in listed if p["planId"] == data["planId"]] == [data["price"]]


@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("svc_createPlan", {"name": "Dollar", "creditsAmount": 10}),
        (
            "svc_registerAgent",
            {"name": "A", "agentUrl": "http://127.0.0.1:9/a", "planName": "p", "creditsAmount": 5},
        ),
    ],
)
@pytest.mark.parametrize("amounts", ["$1", ["$1"], "1000000,$2", ["5", " $2"]])
async def test_dollars_on_the_native_token_are_refused_with_the_usdc_address(
    make_host: HostFactory,
    builder: dict[str, str],
    tool: str,
    extra: dict[str, Any],
    amounts: object,
) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    error = err(await gateway.call_tool(tool, {**extra, "priceAmounts": amounts}), "invalid_params")
    assert "native token" in error["message"]
    assert USDC_ADDRESSES["local"] in error["hint"] and "paymentType fiat" in error["hint"]
    assert ok(await gateway.call_tool("svc_listPlans", {}))["total"] == 0  # nothing registered


async def test_thousands_separators_and_units_in_every_result(
    make_host: HostFactory, builder: dict[str, str], subscriber: dict[str, str]
) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    usdc = ok(
        await gateway.call_tool(
            "svc_createPlan",
            {"name": "Big", "priceAmounts": "$1,000.00", "tokenAddress": USDC, "creditsAmount": 5},
        )
    )
    assert usdc["price"] == "1,000 USDC" and usdc["priceAmounts"] == ["1000000000"]
    fiat = ok(
        await gateway.call_tool(
            "svc_registerAgent",
            {
                "name": "Card agent",
                "agentUrl": "http://127.0.0.1:9/a",
                "planName": "Card",
                "priceAmounts": "$1,234.50",
                "paymentType": "fiat",
                "creditsAmount": 5,
            },
        )
    )
    assert fiat["price"] == "$1,234.50" and fiat["priceAmounts"] == ["1234500000"]
    buyer, _ = await make_host(subscriber["apiKey"])
    crypto_quote = ok(await buyer.call_tool("svc_orderPlan", {"planId": usdc["planId"]}))
    assert crypto_quote["quote"]["price"] == "1,000 USDC"
    card_quote = ok(await buyer.call_tool("svc_orderFiatPlan", {"planId": fiat["planId"]}))
    assert card_quote["quote"]["price"] == "$1,234.50"


def test_price_and_credits_helpers_refuse_what_the_service_would() -> None:
    owner = "0x" + "ab" * 20
    with pytest.raises(PriceError, match="negative"):
        to_minor_units("-5", 6)
    with pytest.raises(PriceError, match="one receiver per price"):
        crypto_price([1, 2, 3], [owner, owner])
    assert crypto_price([1, 2], [owner]).receivers == [owner, owner]
    with pytest.raises(PriceError, match="wallet address"):
        crypto_price([1], ["0xnope"])
    with pytest.raises(PriceError, match="contract address"):
        crypto_price([1], [owner], "0x1")
    assert native_price([1], [owner]).token_address == "0x" + "0" * 40
    assert erc20_price([1], [owner], USDC).token_address == USDC
    with pytest.raises(PriceError, match=r"\$1.00"):
        fiat_price([999_999], [owner])
    assert (fiat_price([1_000_000], [owner]).currency or "").lower() == "usd"
    with pytest.raises(PriceError):
        fixed_credits(0)
    with pytest.raises(PriceError):
        fixed_credits(5, 0)
    with pytest.raises(PriceError):
        dynamic_credits(5, 3, 2)
    with pytest.raises(PriceError):
        dynamic_credits(0, 1, 2)
    with pytest.raises(PriceError):
        expirable_credits(0)
    assert expirable_credits(60).duration_secs == 60
    assert free_price().amounts == []


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"paymentType": "fiat", "tokenAddress": USDC, "priceAmounts": "$2"}, "tokenAddress"),
        ({"creditsPerRequest": 9, "priceAmounts": "0"}, "creditsPerRequest"),
        ({"priceAmounts": "$2", "paymentType": "fiat", "priceReceivers": "0x1, 0x2"}, "receiver"),
    ],
)
async def test_register_agent_refusals(
    make_host: HostFactory, builder: dict[str, str], params: dict[str, Any], words: str
) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    base = {"name": "A", "agentUrl": "http://127.0.0.1:9/a", "planName": "p", "creditsAmount": 5}
    error = err(await gateway.call_tool("svc_registerAgent", {**base, **params}), "invalid_params")
    assert words in error["message"]


async def test_receivers_as_text_and_a_credits_plan_with_a_duration(
    make_host: HostFactory, builder: dict[str, str]
) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    two = [builder["address"], "0x" + "ef" * 20]
    data = ok(
        await gateway.call_tool(
            "svc_createPlan",
            {
                "name": "Split",
                "creditsAmount": 5,
                "priceAmounts": "$1, $2",
                "paymentType": "fiat",
                "priceReceivers": ", ".join(two),
            },
        )
    )
    assert data["price"] == "$3.00" and data["priceAmounts"] == ["1000000", "2000000"]
    error = err(
        await gateway.call_tool(
            "svc_createPlan",
            {"name": "X", "creditsAmount": 5, "durationSecs": 60, "priceAmounts": "0"},
        ),
        "invalid_params",
    )
    assert "durationSecs" in error["message"]


async def test_a_token_for_an_unknown_plan_is_a_clear_error(
    make_host: HostFactory, subscriber: dict[str, str]
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    error = err(await gateway.call_tool("svc_getAccessToken", {"planId": "424242"}))
    assert error["code"] != "internal_error"


def test_a_card_price_in_euros_shows_the_euro_sign() -> None:
    plan = Plan.model_validate(
        {
            "id": "1",
            "metadata": {"main": {"name": "P"}, "plan": {"currency": "EUR"}},
            "registry": {"price": {"isCrypto": False, "amounts": ["2000000"]}},
        }
    )
    assert describe_price(plan) == "€2.00"
