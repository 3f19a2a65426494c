"""``svc delegation``: the spending delegations access tokens are paid through (WIRE.md §6)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .options import global_options
from .session import Session, pass_session

if TYPE_CHECKING:
    from .client import CliClient

DELEGATION_COLUMNS = [
    ("ID", "delegationId"),
    ("PROVIDER", "provider"),
    ("STATUS", "status"),
    ("LIMIT", "spendingLimitCents"),
    ("LEFT", "remainingBudgetCents"),
    ("CURRENCY", "currency"),
    ("EXPIRES", "expiresAt"),
]
METHOD_COLUMNS = [
    ("ID", "id"),
    ("TYPE", "type"),
    ("BRAND", "brand"),
    ("LAST4", "last4"),
    ("PROVIDER", "provider"),
    ("STATUS", "status"),
]


@click.group()
@global_options
def delegation() -> None:
    """Delegations (spending permissions) and the payment methods behind them."""


@delegation.command("create-delegation")
@click.option(
    "--provider",
    type=click.Choice(["erc4337", "stripe", "braintree"]),
    default="erc4337",
    show_default=True,
    help="erc4337 for the account's wallet, else the card network.",
)
@click.option(
    "--spending-limit-cents",
    type=click.IntRange(min=1),
    metavar="N",
    required=True,
    help="Cap, in cents.",
)
@click.option(
    "--duration-secs",
    type=click.IntRange(min=1),
    metavar="N",
    required=True,
    help="Lifetime in seconds.",
)
@click.option("--currency", help="usdc or eurc (erc4337), usd or eur (cards); default usdc/usd.")
@click.option("--payment-method-id", help="Card id (card providers; see list-payment-methods).")
@click.option(
    "--max-transactions",
    type=click.IntRange(min=1),
    metavar="N",
    help="Most settles it may pay for.",
)
@global_options
@pass_session
def create_delegation(
    session: Session,
    provider: str,
    spending_limit_cents: int,
    duration_secs: int,
    currency: str | None,
    payment_method_id: str | None,
    max_transactions: int | None,
) -> None:
    """Create a delegation; tokens name it with get-x402-access-token --delegation-id."""
    chosen = (currency or ("usdc" if provider == "erc4337" else "usd")).lower()

    async def operation(client: CliClient) -> object:
        return await client.create_delegation(
            provider,
            spending_limit_cents,
            duration_secs,
            chosen,
            payment_method_id=payment_method_id,
            max_transactions=max_transactions,
        )

    _, answer = session.call(operation)
    session.output().result(answer, verbatim=("delegationToken",))  # the command's product


@delegation.command("list-delegations")
@global_options
@pass_session
def list_delegations(session: Session) -> None:
    """List your delegations, newest first."""
    _, answer = session.call(lambda c: c.list_delegations())
    session.output().result(answer, items="delegations", columns=DELEGATION_COLUMNS)


@delegation.command("list-payment-methods")
@click.option("--provider", help="Only this provider's methods (stripe, braintree, erc4337...).")
@global_options
@pass_session
def list_payment_methods(session: Session, provider: str | None) -> None:
    """List the enrolled cards and wallets."""
    _, answer = session.call(lambda c: c.list_payment_methods(provider))
    session.output().result(answer, items="paymentMethods", columns=METHOD_COLUMNS)
