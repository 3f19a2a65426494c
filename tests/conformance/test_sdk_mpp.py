"""payments-py 1.18's MPP surface against the sandbox: a deployment without MPP answers every
MPP route with ``BCK.MPP.0002``, which the SDK raises as ``MppNotConfiguredError`` (its own e2e
suite then skips itself, as against a service without MPP)."""

from __future__ import annotations

import pytest
from payments_py.mpp import IssueMppChallengeParams, MppNotConfiguredError, RedeemMppParams
from payments_py.mpp.errors import MppError
from payments_py.x402.types import DelegationConfig, X402TokenOptions

from .conftest import Sdk, credits_plan, crypto_delegation


def test_every_mpp_route_says_mpp_is_not_configured(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "No MPP")
    with pytest.raises(MppNotConfiguredError):
        sdk.builder.mpp.issue_challenge(
            IssueMppChallengeParams(plan_id=plan_id, credits=1, resource="/ask", http_verb="POST")
        )
    options = X402TokenOptions(
        delegation_config=DelegationConfig(delegation_id=crypto_delegation(sdk.subscriber))
    )
    with pytest.raises(MppNotConfiguredError):
        sdk.subscriber.mpp.get_mpp_access_token(plan_id, None, options)
    redeem = RedeemMppParams(credential="Payment abc", resource="/ask", http_verb="POST")
    with pytest.raises(MppNotConfiguredError):
        sdk.builder.mpp.verify_credential(redeem)
    # settle burns, so the SDK reads any 5xx there as "outcome unknown"; still an MppError
    with pytest.raises(MppError):
        sdk.builder.mpp.settle_credential(redeem)
    for name in ("challenge", "verify", "settle", "permissions"):
        assert any(s.path == f"/api/v1/mpp/{name}" for s in sdk.recorder.sent), name
