"""payments-py 1.18 against the sandbox: automatic top-up and the delegation's limits.

A token backed by a delegation pays for the plan itself when the payer holds too few
credits (``SettleResponse.order_tx``); the delegation's ``spendingLimitCents`` and
``maxTransactions`` bound it, and what it cannot pay is refused with ``BCK.X402.0023``.
"""

from __future__ import annotations

import pytest
import requests
from payments_py import Payments
from payments_py.common.payments_error import PaymentsError
from payments_py.common.types import PlanMetadata
from payments_py.environments import ZeroAddress
from payments_py.plans import get_crypto_price_config, get_dynamic_credits_config
from payments_py.x402.helpers import build_payment_required
from payments_py.x402.types import (
    CreateDelegationPayload,
    DelegationConfig,
    X402PaymentRequired,
    X402TokenOptions,
)

from .conftest import Sdk, credits_plan, crypto_delegation

ENDPOINT = "/paid/endpoint"


def _required(plan_id: str) -> X402PaymentRequired:
    return build_payment_required(plan_id=plan_id, endpoint=ENDPOINT, http_verb="POST")


def _token(buyer: Payments, plan_id: str, delegation_id: str) -> str:
    options = X402TokenOptions(delegation_config=DelegationConfig(delegation_id=delegation_id))
    token = buyer.x402.get_x402_access_token(plan_id, token_options=options)["accessToken"]
    assert isinstance(token, str)
    return token


def _balance(buyer: Payments, plan_id: str) -> int:
    return int(buyer.plans.get_plan_balance(plan_id).balance)


def _spent(buyer: Payments, delegation_id: str) -> int:
    listed = [d for d in buyer.delegation.list_delegations() if d.id == delegation_id]
    assert len(listed) == 1
    return int(listed[0].spent_cents or 0)


def _ledger(sdk: Sdk, plan_id: str, address: str) -> dict[str, int]:
    """The sandbox's audit of one holding; conservation (granted = balance + burned) checked."""
    audit = requests.get(f"{sdk.origin}/api/v1/sandbox/ledger/{plan_id}/{address}", timeout=10)
    numbers = {k: int(audit.json()[k]) for k in ("granted", "burned", "balance")}
    assert numbers["granted"] == numbers["balance"] + numbers["burned"]
    return numbers


def test_verify_and_settle_without_an_order_top_up_through_the_delegation(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Top-up", credits=5, per_request=2)
    buyer, address = sdk.account("never ordered")
    delegation = crypto_delegation(buyer, limit_cents=1_000)
    token = _token(buyer, plan_id, delegation)
    verdict = sdk.builder.facilitator.verify_permissions(_required(plan_id), token, "2")
    assert verdict.is_valid, verdict.invalid_reason
    assert _balance(buyer, plan_id) == 0 and _spent(buyer, delegation) == 0  # a dry run
    receipt = sdk.builder.facilitator.settle_permissions(
        _required(plan_id), token, "2", verdict.agent_request_id
    )
    assert receipt.success, receipt.error_reason
    assert receipt.order_tx and receipt.order_tx != receipt.transaction
    assert (receipt.credits_redeemed, receipt.remaining_balance) == ("2", "3")
    assert _balance(buyer, plan_id) == 3
    assert _spent(buyer, delegation) == 100  # 1 USDC
    again = sdk.builder.facilitator.settle_permissions(_required(plan_id), token, "2")
    assert again.success and again.order_tx is None  # the balance pays: no second order
    assert _ledger(sdk, plan_id, address) == {"granted": 5, "burned": 4, "balance": 1}


def test_a_free_plan_tops_up_for_nothing_as_in_the_sdks_e2e_suite(sdk: Sdk) -> None:
    """payments-py ``tests/e2e/test_x402_e2e.py``: a free dynamic plan (10 credits, 1..2 per
    request), a delegation, a token, verify and settle "2" with no order: 8 left."""
    answer = sdk.builder.plans.register_credits_plan(
        PlanMetadata(name="Free dynamic"),
        get_crypto_price_config(0, sdk.builder_address, ZeroAddress),
        get_dynamic_credits_config(10, 1, 2),
    )
    plan_id = str(answer["planId"])
    buyer, _ = sdk.account("free plan")
    delegation = crypto_delegation(buyer, limit_cents=100)
    token = _token(buyer, plan_id, delegation)
    assert sdk.builder.facilitator.verify_permissions(_required(plan_id), token, "2").is_valid
    receipt = sdk.builder.facilitator.settle_permissions(_required(plan_id), token, "2")
    assert receipt.success and receipt.credits_redeemed == "2" and receipt.order_tx
    assert _balance(buyer, plan_id) == 8
    assert _spent(buyer, delegation) == 0


def test_a_delegation_that_cannot_pay_refuses_the_top_up_with_bck_x402_0023(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "One per order", credits=1, per_request=1)
    buyer, address = sdk.account("small budget")
    delegation = crypto_delegation(buyer, limit_cents=150)  # one order of 100 cents
    token = _token(buyer, plan_id, delegation)
    first = sdk.builder.facilitator.settle_permissions(_required(plan_id), token, "1")
    assert first.success and first.order_tx
    verdict = sdk.builder.facilitator.verify_permissions(_required(plan_id), token, "1")
    assert verdict.is_valid is False
    assert "the delegation has 50 of its 150 cents left" in (verdict.invalid_reason or "")
    with pytest.raises(PaymentsError) as refused:
        sdk.builder.facilitator.settle_permissions(_required(plan_id), token, "1")
    assert refused.value.code == "BCK.X402.0023"
    assert _spent(buyer, delegation) == 100
    assert _ledger(sdk, plan_id, address) == {"granted": 1, "burned": 1, "balance": 0}


def test_max_transactions_caps_the_settles_a_delegation_pays(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "Capped", credits=10, per_request=1)
    buyer, address = sdk.account("one transaction")
    buyer.plans.order_plan(plan_id)
    delegation = buyer.delegation.create_delegation(
        CreateDelegationPayload(
            provider="erc4337",
            spending_limit_cents=10_000,
            duration_secs=3_600,
            currency="usdc",
            max_transactions=1,
        )
    ).delegation_id
    assert sdk.recorder.last("POST", "/delegation/create").body["maxTransactions"] == 1
    token = _token(buyer, plan_id, delegation)
    assert sdk.builder.facilitator.settle_permissions(_required(plan_id), token, "1").success
    verdict = sdk.builder.facilitator.verify_permissions(_required(plan_id), token, "1")
    assert verdict.is_valid is False and "maxTransactions" in (verdict.invalid_reason or "")
    for _ in range(2):
        with pytest.raises(PaymentsError) as refused:
            sdk.builder.facilitator.settle_permissions(_required(plan_id), token, "1")
        assert refused.value.code == "BCK.X402.0023"
    assert _ledger(sdk, plan_id, address) == {"granted": 10, "burned": 1, "balance": 9}


def test_a_braintree_card_delegation_tops_up_a_fiat_plan_as_in_the_sdks_e2e_suite(
    sdk: Sdk,
) -> None:
    """payments-py ``tests/e2e/test_x402_card_delegation_braintree_e2e.py``: the seeded
    Braintree card backs a delegation; a $1.00 fiat plan (10 credits, 1..2) is never
    ordered, and verify + settle "2" through the braintree network leave 8 credits."""
    from payments_py.plans import get_fiat_price_config

    answer = sdk.builder.plans.register_credits_plan(
        PlanMetadata(name="Braintree calls"),
        get_fiat_price_config(1_000_000, sdk.builder_address),
        get_dynamic_credits_config(10, 1, 2),
    )
    plan_id = str(answer["planId"])
    buyer, address = sdk.account("braintree buyer")
    card = next(m for m in buyer.delegation.list_payment_methods() if m.provider == "braintree")
    delegation = buyer.delegation.create_delegation(
        CreateDelegationPayload(
            provider="braintree",
            provider_payment_method_id=card.id,
            spending_limit_cents=10_000,
            duration_secs=604_800,
            currency="usd",
        )
    ).delegation_id
    token = buyer.x402.get_x402_access_token(
        plan_id,
        token_options=X402TokenOptions(
            scheme="nvm:card-delegation",
            network="braintree",
            delegation_config=DelegationConfig(delegation_id=delegation),
        ),
    )["accessToken"]
    required = build_payment_required(
        plan_id=plan_id,
        endpoint="/test/endpoint",
        scheme="nvm:card-delegation",
        network="braintree",
    )
    verdict = sdk.builder.facilitator.verify_permissions(required, token, "2")
    assert verdict.is_valid and verdict.network == "braintree"
    receipt = sdk.builder.facilitator.settle_permissions(required, token, "2")
    assert receipt.success and receipt.credits_redeemed == "2" and receipt.network == "braintree"
    assert receipt.order_tx
    assert _balance(buyer, plan_id) == 8
    assert _spent(buyer, delegation) == 100
    assert _ledger(sdk, plan_id, address) == {"granted": 10, "burned": 2, "balance": 8}
