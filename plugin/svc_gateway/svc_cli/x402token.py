"""``svc x402token``: get an access token for a plan, and build the ``paymentRequired``
envelope that verify and settle take."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from ..service.models import SCHEME_CARD, SCHEME_CRYPTO, Accept, PaymentRequirement, Resource
from .errors import BadUsage, Refused
from .inputs import seconds_input
from .options import global_options
from .profiles import ProfileBook, environment_only
from .session import Session, pass_session

if TYPE_CHECKING:
    from .client import CliClient

DEFAULT_SPENDING_LIMIT_CENTS = 10_000
DEFAULT_DURATION_SECS = 7 * 24 * 3600


@click.group()
@global_options
def x402token() -> None:
    """x402 access tokens and payment envelopes."""


async def _card(client: CliClient, payment_method_id: str | None) -> tuple[str, str]:
    """The card (id, provider) a fiat token is paid with: the one named, else the first."""
    from ..service.delegations import CARD_PROVIDERS

    cards = [m for m in await client.list_payment_methods() if m.is_card]
    for card in cards:
        if payment_method_id in (None, card.id):
            provider = card.provider if card.provider in CARD_PROVIDERS else "stripe"
            return card.id, provider or "stripe"
    raise Refused(
        "No enrolled card has that id" if payment_method_id else "No card is enrolled",
        code="no_payment_method",
    )


@x402token.command("get-x402-access-token")
@click.argument("plan_id")
@click.option("--agent-id", help="Agent the token is for (recommended).")
@click.option(
    "--redemption-limit",
    type=click.IntRange(min=1),
    metavar="N",
    help="Most settles (redemptions) the token's delegation pays for (maxTransactions).",
)
@click.option(
    "--order-limit",
    type=click.IntRange(min=1),
    metavar="N",
    help=f"Spending cap of the delegation in cents, for orders it pays "
    f"(default {DEFAULT_SPENDING_LIMIT_CENTS}).",
)
@click.option(
    "--expiration",
    metavar="SECONDS|TIME",
    callback=seconds_input,
    help="Seconds from now, or an ISO 8601 time, until the delegation ends (default 7 days).",
)
@click.option(
    "--payment-type",
    type=click.Choice(["crypto", "fiat"]),
    help="Wallet (crypto) or enrolled card (fiat); default: what the plan takes.",
)
@click.option("--payment-method-id", help="Card to pay with (fiat; default: the first card).")
@click.option("--delegation-id", help="Reuse this delegation instead of creating one.")
@global_options
@pass_session
def get_x402_access_token(
    session: Session,
    plan_id: str,
    agent_id: str | None,
    redemption_limit: int | None,
    order_limit: int | None,
    expiration: int | None,
    payment_type: str | None,
    payment_method_id: str | None,
    delegation_id: str | None,
) -> None:
    """Create a delegation (or reuse one) and get an access token for a plan."""
    if delegation_id is not None and not delegation_id.strip():
        raise BadUsage("--delegation-id must name a delegation (see delegation list-delegations)")
    limits = {"--redemption-limit": redemption_limit, "--order-limit": order_limit}
    limits["--expiration"] = expiration
    if delegation_id is not None and any(v is not None for v in limits.values()):
        given = ", ".join(flag for flag, v in limits.items() if v is not None)
        raise BadUsage(
            f"{given} set limits of a new delegation; leave them out with --delegation-id"
        )
    output = session.output()

    async def operation(client: CliClient) -> str:
        # the plan says how it is paid (WIRE.md §7): check before creating a delegation
        plan = await client.get_plan(plan_id)
        fiat = plan.scheme == SCHEME_CARD
        if payment_type is not None and (payment_type == "fiat") != fiat:
            raise BadUsage(
                f"--payment-type {payment_type}: plan {plan_id} is paid with {plan.scheme}; "
                f"leave --payment-type out or use {'fiat' if fiat else 'crypto'}"
            )
        chosen, network, card_id = delegation_id, None, None
        provider = "erc4337"
        if fiat:
            card_id, provider = await _card(client, payment_method_id)
            network = provider
        if chosen is None:
            created = await client.create_delegation(
                provider,
                order_limit or DEFAULT_SPENDING_LIMIT_CENTS,
                expiration or DEFAULT_DURATION_SECS,
                "usd" if fiat else "usdc",
                payment_method_id=card_id,
                max_transactions=redemption_limit,
            )
            chosen = created.delegation_id
            output.note(f"Created delegation {chosen} (reuse it with --delegation-id).")
        return await client.create_access_token(
            plan_id,
            chosen,
            agent_id=agent_id,
            scheme=SCHEME_CARD if fiat else SCHEME_CRYPTO,
            network=network,
        )

    _, answer = session.call(operation)
    output.result(answer, verbatim=("accessToken",))  # the token asked for, printed whole


@x402token.command("build-payment-required")
@click.argument("plan_id")
@click.option("--resource-url", default="", help="URL of the paid resource (the agent endpoint).")
@click.option("--agent-id", help="Agent selling the resource.")
@click.option("--http-verb", help="HTTP verb of the resource, e.g. POST.")
@click.option(
    "--scheme",
    type=click.Choice([SCHEME_CRYPTO, SCHEME_CARD]),
    help="Payment scheme (default: read from the plan).",
)
@click.option("--network", help="Network (default: the scheme's for the environment).")
@click.option("--description", help="Description of the resource.")
@click.option("--mime-type", help="MIME type of the resource.")
@global_options
@pass_session
def build_payment_required(
    session: Session,
    plan_id: str,
    resource_url: str,
    agent_id: str | None,
    http_verb: str | None,
    scheme: str | None,
    network: str | None,
    description: str | None,
    mime_type: str | None,
) -> None:
    """Print a paymentRequired envelope for a plan, ready for verify-permissions --params."""
    from ..service.client import default_network

    if scheme is None:
        plan, _ = session.call(lambda c: c.get_plan(plan_id), auth=False)
        chosen, environment = plan.scheme, session.resolved.environment
        network = network or default_network(chosen, environment, plan)
    else:
        chosen = SCHEME_CARD if scheme == SCHEME_CARD else SCHEME_CRYPTO
        environment = environment_only(ProfileBook(), session.settings.profile)
        network = network or default_network(chosen, environment)
    extra: dict[str, Any] = {"version": "1"}
    if agent_id:
        extra["agentId"] = agent_id
    if http_verb:
        extra["httpVerb"] = http_verb.upper()
    envelope = PaymentRequirement(
        resource=Resource(url=resource_url, description=description, mime_type=mime_type),
        accepts=[Accept(scheme=chosen, network=network, plan_id=plan_id, extra=extra)],
    )
    session.output(default="json").result(envelope.wire())
