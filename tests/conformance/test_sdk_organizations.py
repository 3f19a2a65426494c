"""payments-py 1.18's organizations surface against the sandbox: memberships, the active
workspace (``X-Current-Org-Id``), members, white-label customers and the activity feed.
A customer's key is a working sandbox key: it buys and pays like any other account."""

from __future__ import annotations

import pytest
from payments_py.common.payments_error import PaymentsError
from payments_py.common.types import (
    OrganizationActivityEventType,
    OrganizationActivityFilters,
    OrganizationMemberRole,
    OrganizationType,
    PlanMetadata,
)
from payments_py.plans import get_fixed_credits_config
from payments_py.x402.helpers import build_payment_required
from payments_py.x402.types import DelegationConfig, X402TokenOptions

from .conftest import Sdk, credits_plan, crypto_delegation, payments_for, usdc_price


def _org_of(payments: object) -> str:
    memberships = payments.organizations.get_my_memberships()  # type: ignore[attr-defined]
    assert len(memberships) == 1
    return str(memberships[0].org_id)


def test_an_account_administers_its_own_enterprise_organization(sdk: Sdk) -> None:
    admin, _ = sdk.account("org admin")
    memberships = admin.organizations.get_my_memberships()
    assert len(memberships) == 1
    mine = memberships[0]
    assert mine.org_id.startswith("org-") and mine.org_name
    assert mine.org_type == OrganizationType.ENTERPRISE
    assert mine.role == OrganizationMemberRole.ADMIN and mine.is_admin is True
    assert mine.has_subscription_history is False


def test_the_pinned_and_the_per_call_workspace_route_a_published_plan(sdk: Sdk) -> None:
    admin, _ = sdk.account("publisher")
    org_id = _org_of(admin)
    admin.set_organization_id(org_id)
    pinned = admin.plans.register_plan(
        PlanMetadata(name="Pinned"), usdc_price(sdk), get_fixed_credits_config(10, 1)
    )
    assert sdk.recorder.last("POST", "/protocol/plans").headers["X-Current-Org-Id"] == org_id
    assert admin.plans.get_plan(pinned["planId"])["orgId"] == org_id
    admin.set_organization_id(None)
    once = admin.plans.register_plan(
        PlanMetadata(name="Per call"),
        usdc_price(sdk),
        get_fixed_credits_config(10, 1),
        organization_id=org_id,
    )
    assert admin.plans.get_plan(once["planId"])["orgId"] == org_id
    assert admin.get_organization_id() is None
    stranger, _ = sdk.account("stranger")
    with pytest.raises(PaymentsError):
        stranger.plans.register_plan(
            PlanMetadata(name="Not mine"),
            usdc_price(sdk),
            get_fixed_credits_config(10, 1),
            organization_id=org_id,
        )


def test_the_activity_feed_pages_and_narrows_by_event_type(sdk: Sdk) -> None:
    admin, _ = sdk.account("feed")
    org_id = _org_of(admin)
    for name in ("One", "Two"):
        admin.plans.register_credits_plan(
            PlanMetadata(name=name), usdc_price(sdk), get_fixed_credits_config(10, 1)
        )
    admin.organizations.onboard_customer("feed-customer@example.test")
    page = admin.organizations.get_organization_activity(
        org_id, OrganizationActivityFilters(page=1, limit=5)
    )
    assert page.total == 3 and len(page.items) == 3
    assert page.items[0].event_type == "customer.added"  # newest first
    assert all(e.subject.kind and e.subject.id and e.occurred_at for e in page.items)
    plans_only = admin.organizations.get_organization_activity(
        org_id, OrganizationActivityFilters(event_type=OrganizationActivityEventType.PLAN_CREATED)
    )
    assert [e.event_type for e in plans_only.items] == ["plan.created"] * 2
    assert sdk.recorder.last("GET", f"/organizations/{org_id}/activity").query == {
        "eventType": "plan.created"
    }
    outsider, _ = sdk.account("outsider")
    with pytest.raises(PaymentsError):
        outsider.organizations.get_organization_activity(org_id)


def test_an_onboarded_customers_key_buys_and_pays_like_any_other(sdk: Sdk) -> None:
    admin, _ = sdk.account("white label")
    onboarded = admin.organizations.onboard_customer("alice@example.test")
    assert sdk.recorder.last("POST", "/organizations/account").body == {
        "email": "alice@example.test",
        "as": "customer",
    }
    assert onboarded.is_customer is True and onboarded.customer_recorded is True
    assert onboarded.nvm_api_key and onboarded.nvm_api_key.startswith("local:")
    customer = payments_for(onboarded.nvm_api_key)
    assert customer.account_address.lower() == (onboarded.user_wallet or "").lower()
    assert customer.organizations.get_my_memberships() == []  # no member seat
    plan_id = credits_plan(sdk, "For customers", credits=3)
    customer.plans.order_plan(plan_id)
    options = X402TokenOptions(
        delegation_config=DelegationConfig(delegation_id=crypto_delegation(customer))
    )
    token = customer.x402.get_x402_access_token(plan_id, token_options=options)["accessToken"]
    paid = sdk.builder.facilitator.settle_permissions(
        build_payment_required(plan_id=plan_id, endpoint="/x"), token, "1"
    )
    assert paid.success and int(customer.plans.get_plan_balance(plan_id).balance) == 2
    again = admin.organizations.onboard_customer("alice@example.test")
    assert again.user_wallet == onboarded.user_wallet and again.customer_recorded is False
    assert again.nvm_api_key and again.nvm_api_key != onboarded.nvm_api_key
    rival, _ = sdk.account("rival org")
    consent = rival.organizations.onboard_customer("alice@example.test")
    assert consent.consent_required is True and consent.nvm_api_key is None


def test_members_are_enrolled_listed_and_cannot_administer(sdk: Sdk) -> None:
    admin, admin_address = sdk.account("team lead")
    org_id = _org_of(admin)
    created = admin.organizations.create_member("employee-7", "bob@example.test")
    assert created.nvm_api_key.startswith("local:") and created.already_member is False
    member = payments_for(created.nvm_api_key)
    [membership] = member.organizations.get_my_memberships()
    assert (membership.org_id, membership.role) == (org_id, OrganizationMemberRole.MEMBER)
    listed = admin.organizations.get_members()
    assert listed.total == 2
    assert {m.user_address.lower() for m in listed.members} == {
        admin_address.lower(),
        created.user_wallet.lower(),
    }
    only = admin.organizations.get_members(role=OrganizationMemberRole.MEMBER)
    assert [m.role for m in only.members] == [OrganizationMemberRole.MEMBER]
    assert admin.organizations.create_member("employee-7").already_member is True
    with pytest.raises(PaymentsError):
        member.organizations.get_members()
    with pytest.raises(PaymentsError):
        member.organizations.onboard_customer("eve@example.test")
    member.set_organization_id(org_id)
    published = member.plans.register_credits_plan(
        PlanMetadata(name="By a member"), usdc_price(sdk), get_fixed_credits_config(5, 1)
    )
    assert member.plans.get_plan(published["planId"])["orgId"] == org_id
