"""payments-py 1.18 against the sandbox: what the SDKs' own e2e suites expect beyond the rest.

Each test names the upstream e2e file whose expectation it pins (payments-py ``tests/e2e`` or the
TypeScript SDK's ``tests/e2e``); the suites themselves run outside the project (issue 15).
"""

from __future__ import annotations

import json

import pytest
import requests
from payments_py import PaymentOptions, Payments
from payments_py.common.types import PlanMetadata
from payments_py.environments import ZeroAddress
from payments_py.plans import (
    get_crypto_price_config,
    get_dynamic_credits_config,
    get_pay_as_you_go_credits_config,
)
from payments_py.utils import get_random_big_int
from payments_py.x402.errors import AccessTokenAlreadyUsedError
from payments_py.x402.helpers import build_payment_required
from payments_py.x402.token import decode_access_token
from payments_py.x402.types import DelegationConfig, X402TokenOptions

from .conftest import USDC, Sdk, crypto_delegation
from .test_sdk_x402 import _agent_with_endpoint

ENDPOINT = "https://myagent.example/api/v1/tasks"


def _ledger(sdk: Sdk, plan_id: str, address: str) -> dict[str, int]:
    audit = requests.get(f"{sdk.origin}/api/v1/sandbox/ledger/{plan_id}/{address}", timeout=10)
    numbers = {k: int(audit.json()[k]) for k in ("granted", "burned", "balance")}
    assert numbers["granted"] == numbers["balance"] + numbers["burned"]
    return numbers


def _token(buyer: Payments, plan_id: str, delegation_id: str, agent_id: str | None = None) -> str:
    options = X402TokenOptions(delegation_config=DelegationConfig(delegation_id=delegation_id))
    token = buyer.x402.get_x402_access_token(plan_id, agent_id, token_options=options)
    assert isinstance(token["accessToken"], str)
    return str(token["accessToken"])


def test_a_pay_as_you_go_plan_is_bought_at_each_settle_through_the_delegation(sdk: Sdk) -> None:
    """payments-py ``test_pay_as_you_go_x402_e2e.py`` (and the TS ``test_pay_as_you_go_e2e``):
    the payment is made when the service is consumed (settle), not when ordering, so a payer
    who never ordered is valid at verify and every settle buys the plan once (``orderTx``)."""
    price = sdk.builder.plans.get_pay_as_you_go_price_config(100, sdk.builder_address, USDC)
    plan_id = sdk.builder.plans.register_plan(
        PlanMetadata(name="PAYG"), price, get_pay_as_you_go_credits_config(), get_random_big_int()
    )["planId"]
    plan = sdk.builder.plans.get_plan(plan_id)
    template = sdk.builder.contracts.pay_as_you_go_template
    assert plan["registry"]["price"]["templateAddress"].lower() == template.lower()
    buyer, address = sdk.account("payg buyer")
    token = _token(buyer, plan_id, crypto_delegation(buyer))
    required = build_payment_required(plan_id=plan_id, endpoint=ENDPOINT, http_verb="POST")
    verdict = sdk.builder.facilitator.verify_permissions(required, token, "1")
    assert verdict.is_valid, verdict.invalid_reason
    orders = set()
    for request_id in (verdict.agent_request_id, None):
        receipt = sdk.builder.facilitator.settle_permissions(
            required, token, "1", agent_request_id=request_id
        )
        assert receipt.success, receipt.error_reason
        assert receipt.credits_redeemed == "1" and receipt.order_tx
        orders.add(receipt.order_tx)
    assert len(orders) == 2
    assert _ledger(sdk, plan_id, address) == {"granted": 2, "burned": 2, "balance": 0}


def test_a_v3_token_signs_the_resource_verb_and_agent_it_was_minted_for(sdk: Sdk) -> None:
    """TS ``test_x402_e2e.test.ts``: the decoded v3 ``payload.authorization`` carries
    ``resourceUrl``, ``httpVerb`` and ``agentId`` as asked; a seller sending
    ``accepts[].extra = {agentId, httpVerb}`` verifies it twice, settles it once, and the
    replay is ``BCK.X402.0059``."""
    plan_id = sdk.builder.plans.register_credits_plan(
        PlanMetadata(name="v3 fields"),
        get_crypto_price_config(0, sdk.builder_address, ZeroAddress),
        get_dynamic_credits_config(10, 1, 2),
    )["planId"]
    agent_id = _agent_with_endpoint(sdk, plan_id, [{"POST": ENDPOINT}])
    buyer, _ = sdk.account("v3 buyer")
    minted = buyer.x402.get_x402_access_token(
        plan_id,
        agent_id,
        token_options=X402TokenOptions(
            delegation_config=DelegationConfig(delegation_id=crypto_delegation(buyer)),
            resource=ENDPOINT,
            http_verb="POST",
            token_version=3,
        ),
    )
    decoded = decode_access_token(minted["accessToken"])
    assert decoded is not None
    authorization = decoded["payload"]["authorization"]
    assert authorization["resourceUrl"] == ENDPOINT
    assert authorization["httpVerb"] == "POST"
    assert authorization["agentId"] == agent_id
    required = build_payment_required(
        plan_id=plan_id, endpoint=ENDPOINT, agent_id=agent_id, http_verb="POST"
    )
    for _ in range(2):
        assert sdk.builder.facilitator.verify_permissions(
            required, minted["accessToken"], "1"
        ).is_valid
    sent = sdk.recorder.last("POST", "/x402/verify").body
    shown = json.dumps(sent)
    assert '"httpVerb": "POST"' in shown and f'"agentId": "{agent_id}"' in shown
    assert sdk.builder.facilitator.settle_permissions(required, minted["accessToken"], "1").success
    with pytest.raises(AccessTokenAlreadyUsedError):
        sdk.builder.facilitator.settle_permissions(required, minted["accessToken"], "1")


def test_a_member_pinned_to_its_organization_pays_like_any_account(sdk: Sdk) -> None:
    """payments-py ``tests/e2e/conftest.py`` pins both test accounts to one Enterprise org
    (``organization_id``, so every call carries ``X-Current-Org-Id``): a member enrolled by the
    builder creates a delegation, mints a token and is charged through it with that header."""
    memberships = sdk.builder.organizations.get_my_memberships()
    org_id = next(m.org_id for m in memberships if m.is_admin)
    enrolled = requests.post(
        f"{sdk.origin}/api/v1/organizations/account",
        headers={"Authorization": f"Bearer {sdk.builder.nvm_api_key}"},
        json={"uniqueExternalId": "e2e-member-buyer"},
        timeout=10,
    ).json()["walletResult"]
    member = Payments.get_instance(
        PaymentOptions(nvm_api_key=enrolled["hash"], organization_id=org_id)
    )
    plan_id = sdk.builder.plans.register_credits_plan(
        PlanMetadata(name="member pays"),
        get_crypto_price_config(0, sdk.builder_address, ZeroAddress),
        get_dynamic_credits_config(10, 1, 2),
    )["planId"]
    token = _token(member, plan_id, crypto_delegation(member))
    assert sdk.recorder.last("POST", "/x402/permissions").headers.get("X-Current-Org-Id") == org_id
    required = build_payment_required(plan_id=plan_id, endpoint=ENDPOINT, http_verb="POST")
    receipt = sdk.builder.facilitator.settle_permissions(required, token, "2")
    assert receipt.success and receipt.credits_redeemed == "2"
    assert _ledger(sdk, plan_id, enrolled["userWallet"])["balance"] == 8
