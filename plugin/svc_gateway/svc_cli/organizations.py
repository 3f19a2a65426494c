"""``svc organizations``: memberships, members, activity, and enrolling accounts (the routes of
payments-py's ``OrganizationsAPI`` the service and the sandbox serve)."""

from __future__ import annotations

from typing import Any

import click

from .options import global_options
from .output import Column
from .session import Session, pass_session

ORG_OPTION = click.option("--org-id", help="Organization to act in (default: your own).")
MEMBERSHIP_COLUMNS: list[Column] = [
    ("ORG", "orgId"),
    ("NAME", "orgName"),
    ("ROLE", "role"),
    ("TYPE", "orgType"),
]
MEMBER_COLUMNS: list[Column] = [
    ("ADDRESS", "userAddress"),
    ("EMAIL", "email"),
    ("ROLE", "role"),
    ("ACTIVE", "isActive"),
]
ACTIVITY_COLUMNS: list[Column] = [
    ("WHEN", "occurredAt"),
    ("EVENT", "eventType"),
    ("ACTOR", "actorUserId"),
]
#: answer fields that carry a new account's API key (in any form): hidden in table mode
KEY_FIELDS = ("hash", "nvmApiKey", "apiKey")
#: the new account's key, printed whole with --format json (the command's product)
ISSUED = tuple(f"walletResult.{name}" for name in KEY_FIELDS)


@click.group()
@global_options
def organizations() -> None:
    """Organizations you belong to: memberships, members, activity, new members."""


@organizations.command("get-my-memberships")
@global_options
@pass_session
def get_my_memberships(session: Session) -> None:
    """List the organizations you are a member of."""
    _, answer = session.call(lambda c: c.my_memberships())
    session.output().result(answer, items="memberships", columns=MEMBERSHIP_COLUMNS)


@organizations.command("get-members")
@click.option("--role", type=click.Choice(["Admin", "Member"]), help="Only this role.")
@click.option("--is-active", type=click.BOOL, help="Only active (true) or inactive (false).")
@click.option(
    "--page", type=click.IntRange(min=1), metavar="N", default=1, show_default=True, help="Page."
)
@click.option(
    "--offset",
    type=click.IntRange(min=1, max=100),
    metavar="N",
    default=100,
    show_default=True,
    help="Members per page.",
)
@ORG_OPTION
@global_options
@pass_session
def get_members(
    session: Session,
    role: str | None,
    is_active: bool | None,
    page: int,
    offset: int,
    org_id: str | None,
) -> None:
    """List your organization's members (admins only)."""
    _, answer = session.call(
        lambda c: c.organization_members(
            org_id=org_id, role=role, is_active=is_active, page=page, page_size=offset
        )
    )
    session.output().result(answer, items="members", columns=MEMBER_COLUMNS)


@organizations.command("get-organization-activity")
@click.argument("org_id")
@click.option("--event-type", help="Only these events, comma separated (e.g. plan.created).")
@click.option(
    "--page", type=click.IntRange(min=1), metavar="N", default=1, show_default=True, help="Page."
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    metavar="N",
    default=20,
    show_default=True,
    help="Events per page.",
)
@global_options
@pass_session
def get_organization_activity(
    session: Session, org_id: str, event_type: str | None, page: int, limit: int
) -> None:
    """List an organization's activity, newest first (members only)."""
    _, answer = session.call(
        lambda c: c.organization_activity(org_id, event_type=event_type, page=page, limit=limit)
    )
    session.output().result(answer, items="items", columns=ACTIVITY_COLUMNS)


def _masked(answer: dict[str, Any]) -> dict[str, Any]:
    wallet = answer.get("walletResult")
    if not isinstance(wallet, dict):
        return answer
    shown = {
        k: ("(hidden: use --format json)" if k in KEY_FIELDS else v) for k, v in wallet.items()
    }
    return {**answer, "walletResult": shown}


@organizations.command("create-member")
@click.option("--user-id", required=True, help="Your own id for the member (uniqueExternalId).")
@click.option("--user-email", help="The member's email.")
@click.option("--user-role", type=click.Choice(["Admin", "Member"]), help="Role (default Member).")
@ORG_OPTION
@global_options
@pass_session
def create_member(
    session: Session,
    user_id: str,
    user_email: str | None,
    user_role: str | None,
    org_id: str | None,
) -> None:
    """Enrol a member account (admins); its API key is printed only with --format json."""
    _, answer = session.call(
        lambda c: c.create_member(user_id, email=user_email, role=user_role, org_id=org_id)
    )
    output = session.output()
    output.result(answer if output.json else _masked(answer), verbatim=ISSUED)


@organizations.command("onboard-customer")
@click.option("--email", required=True, help="The customer's email.")
@ORG_OPTION
@global_options
@pass_session
def onboard_customer(session: Session, email: str, org_id: str | None) -> None:
    """Open a white-label customer account; its API key is printed only with --format json."""
    _, answer = session.call(lambda c: c.onboard_customer(email, org_id))
    output = session.output()
    output.result(answer if output.json else _masked(answer), verbatim=ISSUED)
