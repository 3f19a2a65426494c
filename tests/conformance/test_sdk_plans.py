"""payments-py 1.18 against the sandbox: keys, plans of each kind, orders, balances, mint/burn."""

from __future__ import annotations

import contextlib

import pytest
from payments_py.common.payments_error import PaymentsError
from payments_py.common.types import PlanMetadata
from payments_py.plans import get_expirable_duration_config, get_fixed_credits_config

from .conftest import (
    USDC,
    Sdk,
    credits_plan,
    dynamic_plan,
    fiat_price,
    payments_for,
    time_plan,
    usdc_price,
)


def _credits(plan: dict[str, object]) -> dict[str, str]:
    registry = plan["registry"]
    assert isinstance(registry, dict)
    credits = registry["credits"]
    assert isinstance(credits, dict)
    return {k: str(v) for k, v in credits.items()}


def test_sdk_accepts_a_sandbox_key_and_reads_the_account_from_it(sdk: Sdk) -> None:
    # The SDK decodes the key locally: it needs `<prefix>:<jwt>` with `sub` and `o11y` claims.
    assert sdk.subscriber.get_account_address() == sdk.subscriber_address
    # `local:` is no prefix the SDK knows, so it falls back to its `custom` environment,
    # which is how it reaches the sandbox (a `sandbox:` key would go to the hosted service).
    assert sdk.subscriber.environment_name == "custom"
    assert sdk.subscriber.environment.backend == sdk.origin


def test_sdk_refuses_a_key_without_the_claims_it_needs_before_any_request(sdk: Sdk) -> None:
    before = len(sdk.recorder.sent)
    with pytest.raises(PaymentsError):
        payments_for("local:not-a-jwt")
    assert len(sdk.recorder.sent) == before


def test_sandbox_answers_the_sdk_version_header(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk)
    sdk.builder.plans.get_plan(plan_id)
    sent = sdk.recorder.last("GET", f"/protocol/plans/{plan_id}")
    assert sent.headers["Nevermined-Version"] == "1.1"


def test_contract_info_gives_the_pay_as_you_go_template(sdk: Sdk) -> None:
    contracts = sdk.builder.contracts
    assert contracts.pay_as_you_go_template.startswith("0x")
    assert len(contracts.pay_as_you_go_template) == 42


def test_fixed_credits_plan_round_trips_its_credits_config(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Fixed", credits=50, per_request=2)
    plan = sdk.subscriber.plans.get_plan(plan_id)
    assert str(plan["id"]) == plan_id
    credits = _credits(plan)
    assert credits["amount"] == "50"
    assert credits["minAmount"] == credits["maxAmount"] == "2"
    assert credits["isRedemptionAmountFixed"] == "True"
    assert plan["metadata"]["plan"]["accessLimit"] == "credits"
    sent = sdk.recorder.last("POST", "/protocol/plans")
    assert sent.body["creditsConfig"]["minAmount"] == "2"  # the SDK sends strings


def test_dynamic_credits_plan_keeps_its_range(sdk: Sdk) -> None:
    plan_id = dynamic_plan(sdk, low=1, high=5, credits=40)
    credits = _credits(sdk.subscriber.plans.get_plan(plan_id))
    assert (credits["minAmount"], credits["maxAmount"]) == ("1", "5")
    assert credits["isRedemptionAmountFixed"] == "False"


def test_time_plan_is_time_limited(sdk: Sdk) -> None:
    plan_id = time_plan(sdk, seconds=7200)
    plan = sdk.subscriber.plans.get_plan(plan_id)
    assert _credits(plan)["durationSecs"] == "7200"
    assert plan["metadata"]["plan"]["accessLimit"] == "time"


def test_credits_trial_plan_can_be_ordered_once(sdk: Sdk) -> None:
    answer = sdk.builder.plans.register_credits_trial_plan(
        PlanMetadata(name="Credits trial"),
        sdk.builder.plans.get_free_price_config(),
        get_fixed_credits_config(5, 1),
    )
    plan_id = str(answer["planId"])
    assert sdk.subscriber.plans.get_plan(plan_id)["metadata"]["plan"]["isTrialPlan"] is True
    buyer, address = sdk.account("trial buyer")
    assert buyer.plans.order_plan(plan_id)["success"] is True
    assert buyer.plans.get_plan_balance(plan_id).balance == 5
    with pytest.raises(PaymentsError):
        buyer.plans.order_plan(plan_id)
    assert buyer.plans.get_plan_balance(plan_id, address).balance == 5


def test_time_trial_plan_is_a_time_limited_trial(sdk: Sdk) -> None:
    answer = sdk.builder.plans.register_time_trial_plan(
        PlanMetadata(name="Time trial"),
        sdk.builder.plans.get_free_price_config(),
        get_expirable_duration_config(86_400),
    )
    plan = sdk.subscriber.plans.get_plan(str(answer["planId"]))
    assert plan["metadata"]["plan"]["isTrialPlan"] is True
    assert plan["metadata"]["plan"]["accessLimit"] == "time"


def test_my_plans_lists_only_the_callers_plans(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Mine")
    mine = sdk.builder.plans.get_user_plans()
    ids = [str(p.get("id") or p.get("planId")) for p in mine["plans"]]
    assert plan_id in ids
    assert {"total", "page", "offset"} <= set(mine)
    theirs = sdk.subscriber.plans.get_user_plans()
    assert plan_id not in [str(p.get("id") or p.get("planId")) for p in theirs["plans"]]


def test_crypto_order_grants_the_plans_credits_and_balance_reads_them(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Orderable", credits=30)
    buyer, address = sdk.account("buyer")
    before = buyer.plans.get_plan_balance(plan_id)
    assert (before.balance, before.is_subscriber) == (0, False)
    order = buyer.plans.order_plan(plan_id)
    assert order["success"] is True
    after = buyer.plans.get_plan_balance(plan_id)
    assert after.balance == 30
    assert after.is_subscriber is True
    assert after.holder_address.lower() == address.lower()
    assert after.plan_id == plan_id


def test_fiat_checkout_returns_a_checkout_link(sdk: Sdk) -> None:
    answer = sdk.builder.plans.register_credits_plan(
        PlanMetadata(name="Card plan"), fiat_price(sdk), get_fixed_credits_config(10, 1)
    )
    plan_id = str(answer["planId"])
    assert sdk.subscriber.plans.get_plan(plan_id)["registry"]["price"]["isCrypto"] is False
    checkout = sdk.subscriber.plans.order_fiat_plan(plan_id)
    result = checkout.get("result", checkout)
    link = result.get("checkoutLink") or result.get("checkoutUrl")
    assert isinstance(link, str) and link.startswith("http")
    sent = sdk.recorder.last("POST", "/fiat/stripe/payment")
    assert sent.body == {"planId": plan_id, "sessionType": "embedded"}


def test_owner_mints_credits_to_a_subscriber(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Mintable")
    buyer, address = sdk.account("minted")
    sdk.builder.plans.mint_plan_credits(plan_id, 7, address)
    assert buyer.plans.get_plan_balance(plan_id).balance == 7


def test_a_stranger_cannot_mint_credits(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Guarded")
    stranger, address = sdk.account("stranger")
    with pytest.raises(PaymentsError):
        stranger.plans.mint_plan_credits(plan_id, 7, address)
    assert stranger.plans.get_plan_balance(plan_id).balance == 0


def test_expirable_mint_lapses_after_its_duration(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Expirable")
    buyer, address = sdk.account("expirable")
    sdk.builder.plans.mint_plan_expirable(plan_id, 4, address, 600)
    assert buyer.plans.get_plan_balance(plan_id).balance == 4
    sdk.clock.advance(601)
    assert buyer.plans.get_plan_balance(plan_id).balance == 0


def test_burn_removes_credits_from_the_callers_balance(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Burnable", credits=10)
    buyer, _ = sdk.account("burner")
    buyer.plans.order_plan(plan_id)
    buyer.plans.burn_credits(plan_id, "3")
    assert buyer.plans.get_plan_balance(plan_id).balance == 7


def test_plan_balance_of_another_holder_is_public(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Public balance", credits=9)
    buyer, address = sdk.account("watched")
    buyer.plans.order_plan(plan_id)
    balance = sdk.builder.plans.get_plan_balance(plan_id, address)
    assert balance.balance == 9
    assert balance.holder_address.lower() == address.lower()
    assert "Authorization" not in sdk.recorder.last("GET", f"/balance/{address}").headers


def test_usdc_price_config_round_trips(sdk: Sdk) -> None:
    answer = sdk.builder.plans.register_credits_plan(
        PlanMetadata(name="Priced"), usdc_price(sdk, 2_500_000), get_fixed_credits_config(1, 1)
    )
    price = sdk.subscriber.plans.get_plan(str(answer["planId"]))["registry"]["price"]
    assert [str(a) for a in price["amounts"]] == ["2500000"]
    assert price["receivers"][0].lower() == sdk.builder_address.lower()


def test_owner_redeems_a_holders_credits_once_per_request_id(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Redeemable", credits=10)
    buyer, address = sdk.account("redeemed")
    buyer.plans.order_plan(plan_id)
    sdk.builder.plans.redeem_credits("req-conformance-1", plan_id, address, "2")
    assert buyer.plans.get_plan_balance(plan_id).balance == 8
    sent = sdk.recorder.last("POST", "/protocol/plans/redeem")
    assert sent.body == {
        "agentRequestId": "req-conformance-1",
        "planId": plan_id,
        "redeemFrom": address,
        "amount": "2",
    }
    with contextlib.suppress(PaymentsError):
        sdk.builder.plans.redeem_credits("req-conformance-1", plan_id, address, "2")
    assert buyer.plans.get_plan_balance(plan_id).balance == 8


def test_a_stranger_cannot_redeem_a_holders_credits(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Not yours", credits=10)
    buyer, address = sdk.account("victim")
    buyer.plans.order_plan(plan_id)
    stranger, _ = sdk.account("thief")
    with pytest.raises(PaymentsError):
        stranger.plans.redeem_credits("req-thief", plan_id, address, "5")
    assert buyer.plans.get_plan_balance(plan_id).balance == 10


def test_burning_more_than_the_balance_is_refused_and_burns_nothing(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Overburn", credits=4)
    buyer, _ = sdk.account("overburner")
    buyer.plans.order_plan(plan_id)
    with pytest.raises(PaymentsError):
        buyer.plans.burn_credits(plan_id, "5")
    assert buyer.plans.get_plan_balance(plan_id).balance == 4


def test_an_expirable_mint_adds_to_a_permanent_balance_and_only_its_part_lapses(
    sdk: Sdk,
) -> None:
    plan_id = credits_plan(sdk, "Mixed", credits=10)
    buyer, address = sdk.account("mixed")
    buyer.plans.order_plan(plan_id)
    sdk.builder.plans.mint_plan_expirable(plan_id, 3, address, 300)
    assert buyer.plans.get_plan_balance(plan_id).balance == 13
    sdk.clock.advance(301)
    assert buyer.plans.get_plan_balance(plan_id).balance == 10


def test_time_plan_with_the_sdks_non_expirable_config_never_lapses(sdk: Sdk) -> None:
    """`register_time_plan` + `get_non_expirable_duration_config()` (durationSecs 0) is the SDK's
    way to sell access that does not expire (`common/types.py:332`)."""
    answer = sdk.builder.plans.register_time_plan(
        PlanMetadata(name="Forever"),
        usdc_price(sdk),
        sdk.builder.plans.get_non_expirable_duration_config(),
    )
    plan_id = str(answer["planId"])
    assert sdk.subscriber.plans.get_plan(plan_id)["metadata"]["plan"]["accessLimit"] == "time"
    buyer, _ = sdk.account("forever")
    buyer.plans.order_plan(plan_id)
    assert buyer.plans.get_plan_balance(plan_id).is_subscriber is True
    sdk.clock.advance(10 * 365 * 86_400)
    assert buyer.plans.get_plan_balance(plan_id).is_subscriber is True


@pytest.mark.parametrize("helper", ["native", "eurc", "pay_as_you_go", "free"])
def test_each_sdk_price_helper_registers_a_plan_that_reads_back(sdk: Sdk, helper: str) -> None:
    plans = sdk.builder.plans
    credits = plans.get_fixed_credits_config(5, 1)
    if helper == "native":
        price = plans.get_native_token_price_config(10**15, sdk.builder_address)
    elif helper == "eurc":
        price = plans.get_eurc_price_config(1_000_000, sdk.builder_address)
    elif helper == "pay_as_you_go":
        price = plans.get_pay_as_you_go_price_config(1_000, sdk.builder_address, USDC)
        credits = plans.get_pay_as_you_go_credits_config()
    else:
        price = plans.get_free_price_config()
    plan_id = str(plans.register_credits_plan(PlanMetadata(name=helper), price, credits)["planId"])
    registry = sdk.subscriber.plans.get_plan(plan_id)["registry"]
    sent = sdk.recorder.last("POST", "/protocol/plans").body["priceConfig"]
    assert [str(a) for a in registry["price"]["amounts"]] == sent["amounts"]
    assert registry["price"]["tokenAddress"].lower() == sent["tokenAddress"].lower()
    assert registry["price"]["templateAddress"].lower() == sent["templateAddress"].lower()
    if helper == "pay_as_you_go":
        assert sent["templateAddress"] == sdk.builder.contracts.pay_as_you_go_template


def test_a_128_bit_duration_as_the_sdks_e2e_suites_send_is_kept_exactly(sdk: Sdk) -> None:
    import secrets

    from .conftest import usdc_price

    duration = secrets.randbits(128) | (1 << 127)
    answer = sdk.builder.plans.register_time_plan(
        PlanMetadata(name="Unique by duration"),
        usdc_price(sdk),
        get_expirable_duration_config(duration),
    )
    sent = sdk.recorder.last("POST", "/protocol/plans").body
    assert sent["creditsConfig"]["durationSecs"] == str(duration)
    plan = sdk.builder.plans.get_plan(str(answer["planId"]))
    assert plan["registry"]["credits"]["durationSecs"] == str(duration)
