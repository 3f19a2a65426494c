"""Delegations: a subscriber's standing permission to pay, created before tokens (WIRE.md §6).

The rules follow the create-first flow: ``erc4337`` pays in ``usdc``/``eurc`` from the
account's wallet, card providers pay in ``usd``/``eur`` with the caller's own card, and Visa
is refused because it needs a browser passkey ceremony no API client can perform.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from . import validation as v
from .accounts import card_id
from .db import Row, Store
from .errors import (
    DELEGATION_EXPIRED,
    DELEGATION_INVALID,
    DELEGATION_NEEDS_BROWSER,
    DELEGATION_NOT_FOUND,
    DELEGATION_NOT_YOURS,
    ApiError,
    bad_request,
)
from .plans import iso, require_plan

PROVIDERS = ("erc4337", "stripe", "braintree", "visa")
CURRENCIES = {"erc4337": ("usdc", "eurc"), "stripe": ("usd", "eur"), "braintree": ("usd", "eur")}
MAX_DURATION_SECS = 10 * 365 * 24 * 3600


@dataclass(frozen=True)
class Delegation:
    id: str
    owner: str
    provider: str
    payment_method_id: str
    currency: str
    spending_limit_cents: int
    plan_id: str | None
    max_transactions: int | None
    transaction_count: int
    created_at: float
    expires_at: float
    spent_cents: int = 0

    @classmethod
    def from_row(cls, row: Row) -> Delegation:
        return cls(
            row["id"],
            row["owner"],
            row["provider"],
            row["payment_method_id"],
            row["currency"],
            int(row["spending_limit_cents"]),
            row["plan_id"],
            row["max_transactions"],
            row["transaction_count"],
            row["created_at"],
            row["expires_at"],
            int(row["spent_cents"]),
        )

    @property
    def remaining_cents(self) -> int:
        return max(self.spending_limit_cents - self.spent_cents, 0)

    @property
    def scheme(self) -> str:
        return "svc:erc4337" if self.provider == "erc4337" else "svc:card-delegation"


def create_delegation(store: Store, owner: str, body: dict[str, Any]) -> str:
    provider = v.req_text(body, "provider", max_len=32)
    if provider not in PROVIDERS:
        raise bad_request(
            f"provider must be one of {', '.join(PROVIDERS)}", code=DELEGATION_INVALID
        )
    if provider == "visa":
        raise bad_request(
            "Visa delegations cannot be created from an API client",
            "They need a browser passkey ceremony; use a stripe card or erc4337",
            code=DELEGATION_NEEDS_BROWSER,
        )
    currency = v.text(body, "currency", max_len=8)
    allowed = CURRENCIES[provider]
    if currency not in allowed:
        raise bad_request(
            f"currency must be one of {', '.join(allowed)} for provider {provider}",
            "Crypto delegations use usdc, card delegations use usd",
            code=DELEGATION_INVALID,
        )
    limit = v.bigint(body, "spendingLimitCents", low=1, high=2**63 - 1)
    duration = v.bigint(body, "durationSecs", low=1, high=MAX_DURATION_SECS)
    method = v.text(body, "providerPaymentMethodId", required=False, max_len=200)
    if provider == "erc4337":
        if method not in (None, "", owner) and str(method).lower() != owner:
            raise bad_request(
                "providerPaymentMethodId must be your own wallet address for erc4337",
                code=DELEGATION_INVALID,
            )
        method = owner
    else:
        if not method:
            raise bad_request(
                f"providerPaymentMethodId is required for {provider} delegations",
                "List your cards with GET /payment-methods and send the card's id",
                code=DELEGATION_INVALID,
            )
        if method != card_id(store, owner, provider):
            raise bad_request(
                "providerPaymentMethodId is not one of your enrolled cards",
                "List your cards with GET /payment-methods",
                code=DELEGATION_INVALID,
            )
    plan_id = body.get("planId")
    if plan_id is not None:
        plan_id = require_plan(store, v.identifier(plan_id, "planId")).id
    max_tx = body.get("maxTransactions")
    if max_tx is not None:
        max_tx = v.parse_bigint(max_tx, "maxTransactions", low=1, high=2**31 - 1)
    delegation_id = str(uuid.uuid4())
    now = store.now()
    with store.tx():
        store.run(
            "INSERT INTO delegations (id, owner, provider, payment_method_id, currency, "
            "spending_limit_cents, plan_id, max_transactions, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                delegation_id,
                owner,
                provider,
                method,
                currency,
                str(limit),
                plan_id,
                max_tx,
                now,
                now + duration,
            ),
        )
    return delegation_id


def get_delegation(store: Store, delegation_id: str) -> Delegation | None:
    row = store.one("SELECT * FROM delegations WHERE id = ?", (delegation_id,))
    return None if row is None else Delegation.from_row(row)


def usable_delegation(store: Store, owner: str, delegation_id: str) -> Delegation:
    """The caller's unexpired delegation: 404 unknown, 403 someone else's or expired."""
    delegation = get_delegation(store, delegation_id)
    if delegation is None:
        raise ApiError(
            404,
            DELEGATION_NOT_FOUND,
            "Delegation not found",
            "Create one with POST /delegation/create",
        )
    if delegation.owner != owner:
        raise ApiError(403, DELEGATION_NOT_YOURS, "This delegation belongs to another account")
    if delegation.expires_at <= store.now():
        raise ApiError(
            403,
            DELEGATION_EXPIRED,
            "The delegation expired",
            "Create a new delegation and request a new token",
        )
    return delegation


def transactions_left(delegation: Delegation) -> int | float:
    """Settles the delegation may still pay for (``inf`` without ``maxTransactions``)."""
    if delegation.max_transactions is None:
        return float("inf")
    return delegation.max_transactions - delegation.transaction_count


def count_transaction(store: Store, delegation_id: str) -> None:
    """One settle paid through the delegation (a top-up order inside it included)."""
    store.run(
        "UPDATE delegations SET transaction_count = transaction_count + 1 WHERE id = ?",
        (delegation_id,),
    )


def charge(store: Store, delegation_id: str, cents: int) -> None:
    """Spend ``cents`` of the delegation's budget (a top-up order); the caller checked it."""
    row = store.one("SELECT spent_cents FROM delegations WHERE id = ?", (delegation_id,))
    spent = int(row["spent_cents"]) if row is not None else 0
    store.run(
        "UPDATE delegations SET spent_cents = ? WHERE id = ?", (str(spent + cents), delegation_id)
    )


def delegation_item(store: Store, delegation: Delegation) -> dict[str, Any]:
    active = delegation.expires_at > store.now()
    return {
        "id": delegation.id,
        "delegationId": delegation.id,
        "cardId": None if delegation.provider == "erc4337" else delegation.payment_method_id,
        "provider": delegation.provider,
        "providerPaymentMethodId": delegation.payment_method_id,
        "status": "Active" if active else "Expired",
        "spendingLimitCents": str(delegation.spending_limit_cents),
        "amountSpentCents": str(delegation.spent_cents),
        "spentCents": str(delegation.spent_cents),
        "durationSecs": round(delegation.expires_at - delegation.created_at),
        "remainingBudgetCents": str(delegation.remaining_cents),
        "currency": delegation.currency,
        "transactionCount": delegation.transaction_count,
        "maxTransactions": delegation.max_transactions,
        "planId": delegation.plan_id,
        "expiresAt": iso(delegation.expires_at),
        "createdAt": iso(delegation.created_at),
        "apiKeyId": None,
    }


def list_delegations(store: Store, owner: str, limit: int = 1000) -> list[dict[str, Any]]:
    """``GET /delegation``: a bare array, newest first, as the Python SDK reads it."""
    rows = store.all(
        "SELECT * FROM delegations WHERE owner = ? ORDER BY created_at DESC, rowid DESC LIMIT ?",
        (owner, limit),
    )
    return [delegation_item(store, Delegation.from_row(r)) for r in rows]
