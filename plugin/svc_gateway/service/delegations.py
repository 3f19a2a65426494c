"""The delegations tokens are minted against: one per provider and card, reused until near expiry.

The create-first flow of WIRE.md §6: a token needs a delegation; the client creates one on first
use, mints against it until it is about to expire, and creates a new one, once, when the service
says the one it has can pay no more.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from . import errors
from .models import Delegation, PaymentMethod

CARD_PROVIDERS = ("stripe", "braintree", "visa")
DELEGATION_RENEW_MARGIN_SECS = 60.0
#: the service's answers to a token minted against a delegation that can pay no more
SPENT_CODES = ("BCK.X402.0013", "BCK.X402.0023")


class CreateDelegation(Protocol):
    """``ServiceClient.create_delegation``: how the pool makes a new delegation."""

    def __call__(
        self,
        provider: str,
        spending_limit_cents: int,
        duration_secs: int,
        currency: str,
        *,
        payment_method_id: str | None = None,
        max_transactions: int | None = None,
    ) -> Awaitable[Delegation]: ...


def pick_card(cards: list[PaymentMethod], payment_method_id: str | None) -> PaymentMethod:
    """The enrolled card ``payment_method_id`` names, else the first; ``NotFound`` otherwise."""
    if payment_method_id:
        for card in cards:
            if card.id == payment_method_id:
                return card
        raise errors.NotFound(
            "No enrolled card has that paymentMethodId",
            code="payment_method_not_found",
            hint="List your cards with svc_listPaymentMethods.",
        )
    if not cards:
        raise errors.NotFound(
            "No card is enrolled on this account",
            code="no_payment_method",
            hint="Enroll a card in the dashboard, or pay with crypto.",
        )
    return cards[0]


class DelegationPool:
    """The delegations one client created, reused until they expire (WIRE.md §6)."""

    def __init__(self, create: CreateDelegation) -> None:
        self._create = create
        self._delegations: dict[str, Delegation] = {}
        self._lock = asyncio.Lock()

    async def mint(
        self,
        provider: str,
        currency: str,
        card_id: str | None,
        limit: int,
        duration: int,
        mint: Callable[[Delegation], Awaitable[str]],
        max_transactions: int | None = None,
    ) -> str:
        """``mint`` against the pooled delegation (created first when there is none fresh);
        when the service says that one can pay no more, once more against a new one. With
        ``max_transactions``: against a delegation of its own, created for this token and
        never reused, that backs at most that many settles (what a person approved)."""
        if max_transactions is not None:
            own = await self._create(
                provider,
                limit,
                duration,
                currency,
                payment_method_id=card_id,
                max_transactions=max_transactions,
            )
            return await mint(own)
        for attempt in (1, 2):
            delegation = await self._delegation(provider, currency, card_id, limit, duration)
            try:
                return await mint(delegation)
            except errors.ServiceError as exc:
                if exc.code not in SPENT_CODES or attempt == 2:
                    raise
                self._delegations.pop(_key(provider, card_id, limit), None)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _delegation(
        self, provider: str, currency: str, card_id: str | None, limit: int, duration: int
    ) -> Delegation:
        key = _key(provider, card_id, limit)
        async with self._lock:
            current = self._delegations.get(key)
            fresh = current is not None and (current.expires_at or 0) - time.time() > (
                DELEGATION_RENEW_MARGIN_SECS
            )
            if current is not None and fresh:
                return current
            created = await self._create(
                provider, limit, duration, currency, payment_method_id=card_id
            )
            self._delegations[key] = created
            return created


def _key(provider: str, card_id: str | None, limit: int) -> str:
    """One delegation per provider, card and spending limit: a token asked for with a smaller
    limit (what a person approved) never reuses a delegation that could spend more."""
    return f"{provider}:{card_id or ''}:{limit}"


def delegation_from_answer(body: dict[str, Any], provider: str, duration_secs: int) -> Delegation:
    """Build a delegation record, computing the expiry we will reuse it until."""
    return Delegation(
        delegation_id=str(body.get("delegationId") or ""),
        provider=provider,
        expires_at=time.time() + duration_secs,
    )
