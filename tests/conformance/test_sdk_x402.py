"""payments-py 1.18 against the sandbox: payment methods, delegations, x402 tokens v2/v3,
verify, settle and the single-use rule of v3 tokens."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import pytest
from payments_py import Payments
from payments_py.common.payments_error import PaymentsError
from payments_py.common.types import AgentAPIAttributes, AgentMetadata, AuthType, Endpoint
from payments_py.x402.errors import AccessTokenAlreadyUsedError, is_access_token_already_used
from payments_py.x402.helpers import build_payment_required
from payments_py.x402.token import (
    decode_access_token,
    detect_access_token_version,
    is_single_use_access_token,
)
from payments_py.x402.types import (
    CreateDelegationPayload,
    DelegationConfig,
    X402PaymentRequired,
    X402TokenOptions,
)

from .conftest import NO_TOPUP_CENTS, Sdk, credits_plan, crypto_delegation, dynamic_plan

ENDPOINT = "http://127.0.0.1:9/agents/summarise"


@dataclass
class Shop:
    """One plan sold through one agent whose only registered endpoint is ``POST ENDPOINT``."""

    plan_id: str
    agent_id: str


def _agent_with_endpoint(sdk: Sdk, plan_id: str, endpoints: list[object]) -> str:
    # The SDK's `Endpoint` model serialises as {verb, url}, which the service never matches
    # (payments-py#274, `common/types.py:59`); the service's own shape is {"<VERB>": url}.
    # `model_construct` is the only way to send that shape through the SDK.
    api = AgentAPIAttributes.model_construct(endpoints=endpoints, auth_type=AuthType.NONE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        answer = sdk.builder.agents.register_agent(AgentMetadata(name="Paid agent"), api, [plan_id])
    return str(answer["agentId"])


@pytest.fixture(scope="module")
def shop(sdk: Sdk) -> Shop:
    plan_id = credits_plan(sdk, "Paid calls", credits=100, per_request=1)
    return Shop(plan_id, _agent_with_endpoint(sdk, plan_id, [{"POST": ENDPOINT}]))


def _buyer(sdk: Sdk, shop: Shop) -> tuple[Payments, str, str]:
    """A fresh subscriber with the plan ordered and a crypto delegation."""
    buyer, address = sdk.account("buyer")
    buyer.plans.order_plan(shop.plan_id)
    return buyer, address, crypto_delegation(buyer)


def _token(
    buyer: Payments, shop: Shop, delegation: str, *, v3: bool = False, url: str = ENDPOINT
) -> str:
    options = X402TokenOptions(
        delegation_config=DelegationConfig(delegation_id=delegation),
        **({"resource": url, "http_verb": "POST", "token_version": 3} if v3 else {}),
    )
    answer = buyer.x402.get_x402_access_token(shop.plan_id, shop.agent_id, token_options=options)
    token = answer["accessToken"]
    assert isinstance(token, str)
    return token


def _required(shop: Shop, url: str = ENDPOINT) -> X402PaymentRequired:
    return build_payment_required(
        plan_id=shop.plan_id, endpoint=url, agent_id=shop.agent_id, http_verb="POST"
    )


def _balance(buyer: Payments, shop: Shop) -> int:
    return int(buyer.plans.get_plan_balance(shop.plan_id).balance)


# -- payment methods and delegations ------------------------------------------------------------


def test_payment_methods_parse_as_the_sdks_summaries(sdk: Sdk) -> None:
    methods = sdk.subscriber.delegation.list_payment_methods()
    providers = {m.provider for m in methods}
    assert "stripe" in providers and "erc4337" in providers
    wallet = next(m for m in methods if m.provider == "erc4337")
    assert wallet.id.lower() == sdk.subscriber_address.lower()
    cards = sdk.subscriber.delegation.list_payment_methods(provider="stripe")
    assert cards and all(m.provider == "stripe" for m in cards)
    assert sdk.recorder.last("GET", "/payment-methods").query == {"provider": "stripe"}


def test_created_delegation_is_listed_in_the_sdks_shape(sdk: Sdk) -> None:
    buyer, _ = sdk.account("delegator")
    delegation_id = crypto_delegation(buyer, limit_cents=2_500)
    listed = buyer.delegation.list_delegations()
    mine = [d for d in listed if d.id == delegation_id]
    assert len(mine) == 1
    assert mine[0].spending_limit_cents == 2_500
    assert mine[0].currency == "usdc"
    assert mine[0].expires_at


def test_delegation_without_currency_is_refused_by_the_sdk_model() -> None:
    with pytest.raises(ValueError):
        CreateDelegationPayload(provider="erc4337", spending_limit_cents=100, duration_secs=60)


# -- tokens ----------------------------------------------------------------------------------


def test_v2_token_is_decodable_by_the_sdk(sdk: Sdk, shop: Shop) -> None:
    buyer, address, delegation = _buyer(sdk, shop)
    token = _token(buyer, shop, delegation)
    decoded = decode_access_token(token)
    assert decoded is not None
    assert decoded["x402Version"] == 2
    assert str(decoded["accepted"]["planId"]) == shop.plan_id
    assert decoded["accepted"]["scheme"] == "svc:erc4337"
    assert decoded["payload"]["authorization"]["from"].lower() == address.lower()
    assert detect_access_token_version(token) == 2
    assert not is_single_use_access_token(token)
    sent = sdk.recorder.last("POST", "/x402/permissions")
    assert sent.body["accepted"]["scheme"] == "nvm:erc4337"
    assert "tokenVersion" not in sent.body


def test_v3_token_is_decodable_and_single_use(sdk: Sdk, shop: Shop) -> None:
    buyer, _, delegation = _buyer(sdk, shop)
    answer = buyer.x402.get_x402_access_token(
        shop.plan_id,
        shop.agent_id,
        token_options=X402TokenOptions(
            delegation_config=DelegationConfig(delegation_id=delegation),
            resource=ENDPOINT,
            http_verb="post",
            token_version=3,
        ),
    )
    assert answer["tokenVersion"] == 3
    decoded = decode_access_token(answer["accessToken"])
    assert decoded is not None and decoded["x402Version"] == 2
    nonce = decoded["payload"]["authorization"]["nonce"]
    assert isinstance(nonce, str) and nonce.strip()
    sent = sdk.recorder.last("POST", "/x402/permissions")
    assert sent.body["tokenVersion"] == 3
    assert sent.body["resource"] == {"url": ENDPOINT}
    assert sent.body["accepted"]["extra"]["httpVerb"] == "POST"


def test_two_v3_tokens_carry_different_nonces(sdk: Sdk, shop: Shop) -> None:
    buyer, _, delegation = _buyer(sdk, shop)
    first = decode_access_token(_token(buyer, shop, delegation, v3=True))
    second = decode_access_token(_token(buyer, shop, delegation, v3=True))
    assert first and second
    assert first["payload"]["authorization"]["nonce"] != second["payload"]["authorization"]["nonce"]


def test_v3_mint_for_an_unregistered_url_is_refused(sdk: Sdk, shop: Shop) -> None:
    buyer, _, delegation = _buyer(sdk, shop)
    with pytest.raises(PaymentsError) as caught:
        _token(buyer, shop, delegation, v3=True, url="http://127.0.0.1:9/elsewhere")
    assert caught.value.code == "BCK.PROTOCOL.0031"


def test_sdk_shaped_endpoints_never_match(sdk: Sdk) -> None:
    """`{verb, url}` entries (what `Endpoint` emits) fail with BCK.PROTOCOL.0031, at
    registration or at the first v3 mint against them."""
    plan_id = credits_plan(sdk, "Mis-registered")
    with pytest.raises(PaymentsError) as caught:
        agent_id = _agent_with_endpoint(sdk, plan_id, [Endpoint(verb="POST", url=ENDPOINT)])
        buyer, _ = sdk.account("mis")
        buyer.plans.order_plan(plan_id)
        buyer.x402.get_x402_access_token(
            plan_id,
            agent_id,
            token_options=X402TokenOptions(
                delegation_config=DelegationConfig(delegation_id=crypto_delegation(buyer)),
                resource=ENDPOINT,
                http_verb="POST",
                token_version=3,
            ),
        )
    assert caught.value.code == "BCK.PROTOCOL.0031"


def test_inline_delegation_fields_still_mint_a_token(sdk: Sdk, shop: Shop) -> None:
    buyer, _ = sdk.account("inline")
    buyer.plans.order_plan(shop.plan_id)
    with pytest.warns(FutureWarning):
        answer = buyer.x402.get_x402_access_token(
            shop.plan_id,
            shop.agent_id,
            token_options=X402TokenOptions(
                delegation_config=DelegationConfig(
                    spending_limit_cents=1_000, duration_secs=3_600, currency="usdc"
                )
            ),
        )
    verdict = buyer.facilitator.verify_permissions(_required(shop), answer["accessToken"], "1")
    assert verdict.is_valid, verdict.invalid_reason


def test_card_delegation_token_verifies_for_a_fiat_plan(sdk: Sdk) -> None:
    from payments_py.common.types import PlanMetadata
    from payments_py.plans import get_fixed_credits_config

    from .conftest import fiat_price

    plan_id = str(
        sdk.builder.plans.register_credits_plan(
            PlanMetadata(name="Card calls"), fiat_price(sdk), get_fixed_credits_config(10, 1)
        )["planId"]
    )
    buyer, address = sdk.account("card buyer")
    sdk.builder.plans.mint_plan_credits(plan_id, 10, address)
    card = buyer.delegation.list_payment_methods(provider="stripe")[0]
    delegation = buyer.delegation.create_delegation(
        CreateDelegationPayload(
            provider="stripe",
            provider_payment_method_id=card.id,
            spending_limit_cents=5_000,
            duration_secs=3_600,
            currency="usd",
        )
    )
    token = buyer.x402.get_x402_access_token(
        plan_id,
        token_options=X402TokenOptions(
            scheme="nvm:card-delegation",
            network="stripe",
            delegation_config=DelegationConfig(delegation_id=delegation.delegation_id),
        ),
    )["accessToken"]
    decoded = decode_access_token(token)
    assert decoded and decoded["accepted"]["scheme"] == "svc:card-delegation"
    required = build_payment_required(
        plan_id=plan_id, scheme="nvm:card-delegation", network="stripe"
    )
    verdict = sdk.builder.facilitator.verify_permissions(required, token, "1")
    assert verdict.is_valid, verdict.invalid_reason


# -- verify and settle -------------------------------------------------------------------------


def test_verify_with_max_amount_is_a_repeatable_dry_run(sdk: Sdk, shop: Shop) -> None:
    buyer, address, delegation = _buyer(sdk, shop)
    token = _token(buyer, shop, delegation)
    for _ in range(3):
        verdict = sdk.builder.facilitator.verify_permissions(_required(shop), token, "1")
        assert verdict.is_valid, verdict.invalid_reason
        assert (verdict.payer or "").lower() == address.lower()
        assert verdict.agent_request_id
    assert _balance(buyer, shop) == 100
    assert sdk.recorder.last("POST", "/x402/verify").body["maxAmount"] == "1"


def test_verify_without_max_amount_is_accepted(sdk: Sdk, shop: Shop) -> None:
    buyer, _, delegation = _buyer(sdk, shop)
    token = _token(buyer, shop, delegation)
    verdict = sdk.builder.facilitator.verify_permissions(_required(shop), token)
    assert verdict.is_valid, verdict.invalid_reason
    assert "maxAmount" not in sdk.recorder.last("POST", "/x402/verify").body


def test_verify_refuses_more_than_the_balance(sdk: Sdk, shop: Shop) -> None:
    plan_id = dynamic_plan(sdk, low=1, high=500, credits=5)
    buyer, _ = sdk.account("poor")
    buyer.plans.order_plan(plan_id)
    wide = Shop(plan_id, _agent_with_endpoint(sdk, plan_id, [{"POST": ENDPOINT}]))
    token = _token(buyer, wide, crypto_delegation(buyer, limit_cents=NO_TOPUP_CENTS))
    verdict = sdk.builder.facilitator.verify_permissions(_required(wide), token, "6")
    assert verdict.is_valid is False
    assert verdict.invalid_reason


def test_a_token_rewritten_to_another_payer_is_refused(sdk: Sdk, shop: Shop) -> None:
    """An attacker decodes their own token, puts a victim's address in `from` and re-encodes
    it (`encode_access_token`); the service must refuse it and charge nobody."""
    from payments_py.x402.token import encode_access_token

    victim, victim_address, _ = _buyer(sdk, shop)
    attacker, _, delegation = _buyer(sdk, shop)
    decoded = decode_access_token(_token(attacker, shop, delegation))
    assert decoded is not None
    decoded["payload"]["authorization"]["from"] = victim_address
    forged = encode_access_token(decoded)
    try:
        verdict = sdk.builder.facilitator.verify_permissions(_required(shop), forged, "1")
    except PaymentsError:
        verdict = None
    assert verdict is None or verdict.is_valid is False
    try:
        receipt = sdk.builder.facilitator.settle_permissions(_required(shop), forged, "1")
    except PaymentsError:
        receipt = None
    assert receipt is None or receipt.success is False
    assert _balance(victim, shop) == 100
    assert _balance(attacker, shop) == 100


def test_settle_burns_max_amount_and_reports_it(sdk: Sdk, shop: Shop) -> None:
    plan_id = dynamic_plan(sdk, low=1, high=5, credits=20)
    buyer, address = sdk.account("settler")
    buyer.plans.order_plan(plan_id)
    wide = Shop(plan_id, _agent_with_endpoint(sdk, plan_id, [{"POST": ENDPOINT}]))
    token = _token(buyer, wide, crypto_delegation(buyer))
    verdict = sdk.builder.facilitator.verify_permissions(_required(wide), token, "3")
    assert verdict.is_valid, verdict.invalid_reason
    receipt = sdk.builder.facilitator.settle_permissions(
        _required(wide), token, "3", verdict.agent_request_id
    )
    assert receipt.success, receipt.error_reason
    assert receipt.credits_redeemed == "3"
    assert receipt.remaining_balance == "17"
    assert (receipt.payer or "").lower() == address.lower()
    assert receipt.transaction
    assert int(buyer.plans.get_plan_balance(plan_id).balance) == 17


def test_settle_without_max_amount_burns_the_plans_credits_per_request(
    sdk: Sdk, shop: Shop
) -> None:
    plan_id = credits_plan(sdk, "Two per call", credits=10, per_request=2)
    buyer, _ = sdk.account("default amount")
    buyer.plans.order_plan(plan_id)
    two = Shop(plan_id, _agent_with_endpoint(sdk, plan_id, [{"POST": ENDPOINT}]))
    token = _token(buyer, two, crypto_delegation(buyer))
    verdict = sdk.builder.facilitator.verify_permissions(_required(two), token)
    assert verdict.is_valid, verdict.invalid_reason
    receipt = sdk.builder.facilitator.settle_permissions(
        _required(two), token, agent_request_id=verdict.agent_request_id
    )
    assert receipt.success, receipt.error_reason
    assert int(buyer.plans.get_plan_balance(plan_id).balance) == 8


def test_settle_replayed_with_the_same_request_id_burns_once(sdk: Sdk, shop: Shop) -> None:
    buyer, _, delegation = _buyer(sdk, shop)
    token = _token(buyer, shop, delegation)
    verdict = sdk.builder.facilitator.verify_permissions(_required(shop), token, "1")
    first = sdk.builder.facilitator.settle_permissions(
        _required(shop), token, "1", verdict.agent_request_id
    )
    again = sdk.builder.facilitator.settle_permissions(
        _required(shop), token, "1", verdict.agent_request_id
    )
    assert first.success and again.success
    assert again.transaction == first.transaction
    assert _balance(buyer, shop) == 99


def test_v2_token_is_reusable_across_settles(sdk: Sdk, shop: Shop) -> None:
    buyer, _, delegation = _buyer(sdk, shop)
    token = _token(buyer, shop, delegation)
    for _ in range(2):
        verdict = sdk.builder.facilitator.verify_permissions(_required(shop), token, "1")
        receipt = sdk.builder.facilitator.settle_permissions(
            _required(shop), token, "1", verdict.agent_request_id
        )
        assert receipt.success, receipt.error_reason
    assert _balance(buyer, shop) == 98


def test_v3_token_settles_once_and_a_replay_is_bck_x402_0059(sdk: Sdk, shop: Shop) -> None:
    buyer, _, delegation = _buyer(sdk, shop)
    token = _token(buyer, shop, delegation, v3=True)
    first = sdk.builder.facilitator.verify_permissions(_required(shop), token, "1")
    assert first.is_valid, first.invalid_reason
    receipt = sdk.builder.facilitator.settle_permissions(
        _required(shop), token, "1", first.agent_request_id
    )
    assert receipt.success, receipt.error_reason
    # verify never consumes, so the replay passes verify and is caught at settle
    second = sdk.builder.facilitator.verify_permissions(_required(shop), token, "1")
    assert second.is_valid, second.invalid_reason
    assert second.agent_request_id != first.agent_request_id
    with pytest.raises(AccessTokenAlreadyUsedError) as caught:
        sdk.builder.facilitator.settle_permissions(
            _required(shop), token, "1", second.agent_request_id
        )
    assert is_access_token_already_used(caught.value)
    assert _balance(buyer, shop) == 99


def test_v3_token_is_bound_to_its_url_and_verb(sdk: Sdk) -> None:
    """The agent registers three endpoints; a v3 token minted for POST ENDPOINT verifies for
    that one only, although the other two pass the agent's allow-list."""
    other = "http://127.0.0.1:9/agents/other"
    plan_id = credits_plan(sdk, "Bound", credits=10)
    endpoints: list[object] = [{"POST": ENDPOINT}, {"POST": other}, {"GET": ENDPOINT}]
    bound = Shop(plan_id, _agent_with_endpoint(sdk, plan_id, endpoints))
    buyer, _ = sdk.account("bound")
    buyer.plans.order_plan(plan_id)
    token = _token(buyer, bound, crypto_delegation(buyer), v3=True)
    v2 = _token(buyer, bound, crypto_delegation(buyer))
    elsewhere = [
        _required(bound, other),
        build_payment_required(
            plan_id=plan_id, endpoint=ENDPOINT, agent_id=bound.agent_id, http_verb="GET"
        ),
    ]
    for required in elsewhere:
        # a v2 token is not bound: the same envelopes are fine for it
        assert sdk.builder.facilitator.verify_permissions(required, v2, "1").is_valid
        try:
            verdict = sdk.builder.facilitator.verify_permissions(required, token, "1")
        except PaymentsError:
            verdict = None
        assert verdict is None or verdict.is_valid is False
    right = sdk.builder.facilitator.verify_permissions(_required(bound), token, "1")
    assert right.is_valid, right.invalid_reason
    assert int(buyer.plans.get_plan_balance(plan_id).balance) == 10


def test_verify_reserves_nothing_so_two_verifies_fit_one_credit(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "One call", credits=1, per_request=1)
    buyer, _ = sdk.account("one credit")
    buyer.plans.order_plan(plan_id)
    one = Shop(plan_id, _agent_with_endpoint(sdk, plan_id, [{"POST": ENDPOINT}]))
    token = _token(buyer, one, crypto_delegation(buyer))
    first = sdk.builder.facilitator.verify_permissions(_required(one), token, "1")
    second = sdk.builder.facilitator.verify_permissions(_required(one), token, "1")
    assert first.is_valid, first.invalid_reason
    assert second.is_valid, second.invalid_reason
    assert int(buyer.plans.get_plan_balance(plan_id).balance) == 1


def test_settle_fails_when_the_balance_was_spent_after_verify(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Raced", credits=1, per_request=1)
    buyer, _ = sdk.account("raced")
    buyer.plans.order_plan(plan_id)
    raced = Shop(plan_id, _agent_with_endpoint(sdk, plan_id, [{"POST": ENDPOINT}]))
    token = _token(buyer, raced, crypto_delegation(buyer, limit_cents=NO_TOPUP_CENTS))
    first = sdk.builder.facilitator.verify_permissions(_required(raced), token, "1")
    second = sdk.builder.facilitator.verify_permissions(_required(raced), token, "1")
    assert first.is_valid and second.is_valid
    paid = sdk.builder.facilitator.settle_permissions(
        _required(raced), token, "1", first.agent_request_id
    )
    assert paid.success, paid.error_reason
    try:
        late = sdk.builder.facilitator.settle_permissions(
            _required(raced), token, "1", second.agent_request_id
        )
    except PaymentsError:
        late = None
    assert late is None or late.success is False
    assert int(buyer.plans.get_plan_balance(plan_id).balance) == 0


def test_time_plan_tokens_work_inside_the_window_only(sdk: Sdk) -> None:
    from .conftest import time_plan

    plan_id = time_plan(sdk, seconds=3_600)
    buyer, _ = sdk.account("hourly")
    buyer.plans.order_plan(plan_id)
    access = buyer.plans.get_plan_balance(plan_id)
    assert access.is_subscriber is True
    assert access.plan_type == "time"
    hourly = Shop(plan_id, _agent_with_endpoint(sdk, plan_id, [{"POST": ENDPOINT}]))
    token = _token(buyer, hourly, crypto_delegation(buyer, limit_cents=100_000))
    inside = sdk.builder.facilitator.verify_permissions(_required(hourly), token, "1")
    assert inside.is_valid, inside.invalid_reason
    sdk.clock.advance(3_601)
    try:
        after = sdk.builder.facilitator.verify_permissions(_required(hourly), token, "1")
    except PaymentsError:
        after = None
    assert after is None or after.is_valid is False


def test_an_expired_delegation_mints_nothing_and_its_tokens_stop_verifying(
    sdk: Sdk, shop: Shop
) -> None:
    buyer, _ = sdk.account("short delegation")
    buyer.plans.order_plan(shop.plan_id)
    delegation = buyer.delegation.create_delegation(
        CreateDelegationPayload(
            provider="erc4337", spending_limit_cents=1_000, duration_secs=60, currency="usdc"
        )
    ).delegation_id
    token = _token(buyer, shop, delegation)
    assert sdk.builder.facilitator.verify_permissions(_required(shop), token, "1").is_valid
    sdk.clock.advance(61)
    try:
        late = sdk.builder.facilitator.verify_permissions(_required(shop), token, "1")
    except PaymentsError:
        late = None
    assert late is None or late.is_valid is False
    with pytest.raises(PaymentsError) as caught:
        _token(buyer, shop, delegation)
    assert caught.value.code == "BCK.X402.0013"
    listed = [d for d in buyer.delegation.list_delegations() if d.id == delegation]
    assert listed and (listed[0].status or "").lower() == "expired"
    assert _balance(buyer, shop) == 100


def test_settle_without_max_amount_on_a_dynamic_plan_burns_its_maximum(sdk: Sdk) -> None:
    """The SDK leaves the default to the service, which reads it as the plan's max credits per
    request (TS SDK commit 9c1148f); absent and "0" mean the same."""
    plan_id = dynamic_plan(sdk, low=2, high=5, credits=20)
    buyer, _ = sdk.account("dynamic default")
    buyer.plans.order_plan(plan_id)
    wide = Shop(plan_id, _agent_with_endpoint(sdk, plan_id, [{"POST": ENDPOINT}]))
    token = _token(buyer, wide, crypto_delegation(buyer))
    verdict = sdk.builder.facilitator.verify_permissions(_required(wide), token)
    assert verdict.is_valid, verdict.invalid_reason
    receipt = sdk.builder.facilitator.settle_permissions(
        _required(wide), token, agent_request_id=verdict.agent_request_id
    )
    assert receipt.success, receipt.error_reason
    assert receipt.credits_redeemed == "5"
    zero = sdk.builder.facilitator.settle_permissions(_required(wide), token, "0")
    assert zero.success and zero.credits_redeemed == "5"
    assert sdk.recorder.last("POST", "/x402/settle").body["maxAmount"] == "0"
    assert int(buyer.plans.get_plan_balance(plan_id).balance) == 10


def test_a_v2_token_arms_no_endpoint_allow_list(sdk: Sdk, shop: Shop) -> None:
    """A v2 token carries no resource.url, so the service skips endpoint validation for it
    (`x402/token_request.py:128-137`: the token's resource.url is what switches the backend's
    `enforceEndpointAllowlist` on; without it the backend logs "resource.url not provided in
    token … skipping endpoint validation"). Only v3 tokens are held to the agent's endpoints."""
    buyer, _, delegation = _buyer(sdk, shop)
    token = _token(buyer, shop, delegation)
    verdict = sdk.builder.facilitator.verify_permissions(
        _required(shop, "http://127.0.0.1:9/not-registered"), token, "1"
    )
    assert verdict.is_valid, verdict.invalid_reason


@pytest.mark.parametrize(
    "edit",
    [
        ("resource", "url", "http://127.0.0.1:9/elsewhere"),
        ("accepted", "planId", "1"),
        ("payload", "authorization", "nonce", "0x" + "3" * 64),
    ],
    ids=["resource.url", "accepted.planId", "authorization.nonce"],
)
def test_a_v3_token_rewritten_through_the_sdks_codec_fails_its_signature(
    sdk: Sdk, shop: Shop, edit: tuple[str, ...]
) -> None:
    from payments_py.x402.token import encode_access_token

    buyer, _, delegation = _buyer(sdk, shop)
    decoded = decode_access_token(_token(buyer, shop, delegation, v3=True))
    assert decoded is not None
    node = decoded
    for key in edit[:-2]:
        node = node[key]
    node[edit[-2]] = edit[-1]
    verdict = sdk.builder.facilitator.verify_permissions(
        _required(shop), encode_access_token(decoded), "1"
    )
    assert verdict.is_valid is False
    assert verdict.invalid_reason == "invalid access token: signature check failed"
