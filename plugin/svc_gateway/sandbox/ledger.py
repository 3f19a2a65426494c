"""The credits ledger: orders, fiat checkouts, mints, balances and burns.

Credits are rows, never a mutable counter: a grant adds a row, a burn adds a row, and the
balance is their difference, so "granted = balance + burned" holds by construction. Time
plans grant access until a moment instead; their balance reads 1 while access lasts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from .db import Store
from .errors import (
    CHECKOUT_EXPIRED,
    CHECKOUT_NOT_FOUND,
    CRYPTO_PLAN_NOT_FIAT,
    FIAT_PLAN_NEEDS_CHECKOUT,
    MAX_ORDERS_REACHED,
    TRIAL_ALREADY_USED,
    ApiError,
    bad_request,
    not_owner,
)
from .plans import Plan, require_plan
from .tokens import random_hex, tx_hash

CHECKOUT_TTL_SECS = 3600.0


@dataclass(frozen=True)
class Holding:
    """What one holder has on one plan right now."""

    granted: int
    burned: int
    remaining: int
    access_until: float | None
    is_time: bool
    now: float

    @property
    def active(self) -> bool:
        return self.access_until is not None and self.access_until > self.now

    @property
    def expired(self) -> int:
        """Credits that expired unused (mint-expirable grants)."""
        return self.granted - self.burned - self.remaining

    @property
    def balance(self) -> int:
        if self.is_time:
            return 1 if self.active else 0
        return self.remaining


def holding(store: Store, plan: Plan, holder: str) -> Holding:
    """Replay grants and burns in order; a burn spends the soonest-expiring credits first."""
    now = store.now()
    events: list[tuple[float, int, int, float | None]] = []
    for row in store.all(
        "SELECT amount, expires_at, created_at FROM grants WHERE plan_id = ? AND holder = ?",
        (plan.id, holder),
    ):
        events.append((row["created_at"], 0, int(row["amount"]), row["expires_at"]))
    for row in store.all(
        "SELECT amount, created_at FROM burns WHERE plan_id = ? AND holder = ?",
        (plan.id, holder),
    ):
        events.append((row["created_at"], 1, int(row["amount"]), None))
    events.sort(key=lambda e: (e[0], e[1]))
    buckets: list[list[Any]] = []  # [expires_at or None, amount left]
    granted = burned = 0
    access_until: float | None = None
    for at, kind, amount, expires in events:
        if kind == 0:
            granted += amount
            buckets.append([expires, amount])
            if expires is not None:
                access_until = expires if access_until is None else max(access_until, expires)
            continue
        burned += amount
        buckets = [b for b in buckets if b[0] is None or b[0] > at]
        buckets.sort(key=lambda b: (b[0] is None, b[0] or 0.0))
        for bucket in buckets:
            spent = min(bucket[1], amount)
            bucket[1] -= spent
            amount -= spent
    remaining = sum(b[1] for b in buckets if b[0] is None or b[0] > now)
    return Holding(granted, burned, remaining, access_until, plan.is_time, now)


def held(store: Store, plan_id: str, payer: str) -> int:
    """Credits reserved by unsettled, unexpired verify holds."""
    rows = store.all(
        "SELECT amount FROM holds WHERE plan_id = ? AND payer = ? AND answer IS NULL "
        "AND expires_at > ?",
        (plan_id, payer, store.now()),
    )
    return sum(int(r["amount"]) for r in rows)


def balance_view(store: Store, plan: Plan, holder: str) -> dict[str, Any]:
    """The balance object (WIRE.md §2.2); verify holds do not lower the shown balance."""
    state = holding(store, plan, holder)
    return {
        "planId": plan.id,
        "planName": plan.name,
        "planType": plan.kind,
        "holderAddress": holder,
        "balance": str(state.balance),
        "creditsContract": plan.credits_contract,
        "isSubscriber": state.balance > 0,
        "pricePerCredit": plan.price_per_credit(),
    }


def ledger_view(store: Store, plan: Plan, holder: str) -> dict[str, Any]:
    """Sandbox-only audit numbers: ``granted = balance + burned + expired`` (credits plans)."""
    state = holding(store, plan, holder)
    return {
        "planId": plan.id,
        "holderAddress": holder,
        "planType": plan.kind,
        "granted": str(state.granted),
        "expired": str(state.expired),
        "burned": str(state.burned),
        "held": str(held(store, plan.id, holder)),
        "balance": str(state.balance),
    }


def _grant(
    store: Store, plan: Plan, holder: str, amount: int, source: str, duration: int | None
) -> str:
    """Add credits (or, for time plans, extend access); returns the transaction hash."""
    now = store.now()
    expires: float | None = None
    if duration:
        expires = now + duration
        if plan.is_time:
            current = holding(store, plan, holder)
            if current.active and current.access_until is not None:
                expires = current.access_until + duration
    tx = tx_hash()
    store.run(
        "INSERT INTO grants (plan_id, holder, amount, expires_at, source, tx, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (plan.id, holder, str(amount), expires, source, tx, now),
    )
    return tx


def burn(store: Store, plan: Plan, holder: str, amount: int, hold_id: str | None) -> str:
    tx = tx_hash()
    if amount > 0:
        store.run(
            "INSERT INTO burns (plan_id, holder, amount, hold_id, tx, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (plan.id, holder, str(amount), hold_id, tx, store.now()),
        )
    return tx


def _check_orderable(store: Store, plan: Plan, buyer: str) -> None:
    """SPEC.md limits: one purchase per user on trial plans, at most ``maxOrders`` orders."""
    if plan.is_trial and store.one(
        "SELECT 1 FROM orders WHERE plan_id = ? AND buyer = ?", (plan.id, buyer)
    ):
        raise ApiError(
            409,
            TRIAL_ALREADY_USED,
            "This trial plan was already ordered by this account",
            "Trial plans can be bought once per user; order a regular plan instead",
        )
    fresh = require_plan(store, plan.id)
    limit = fresh.max_orders
    if limit is not None and fresh.orders_count >= limit:
        raise ApiError(
            409,
            MAX_ORDERS_REACHED,
            f"This plan reached its limit of {limit} orders",
            "Ask the plan owner for another plan",
        )


def _record_order(store: Store, plan: Plan, buyer: str, kind: str) -> str:
    _check_orderable(store, plan, buyer)
    tx = _grant(store, plan, buyer, plan.credits_amount, kind, plan.duration_secs or None)
    store.run(
        "INSERT INTO orders (plan_id, buyer, kind, tx, created_at) VALUES (?, ?, ?, ?, ?)",
        (plan.id, buyer, kind, tx, store.now()),
    )
    store.run("UPDATE plans SET orders_count = orders_count + 1 WHERE id = ?", (plan.id,))
    return tx


def order_plan(store: Store, plan: Plan, buyer: str) -> str:
    """``POST /protocol/plans/{id}/order``: crypto and free plans only."""
    if not plan.is_crypto and plan.total_price > 0:
        raise bad_request(
            "This plan is paid by card and cannot be ordered with crypto",
            "Use the fiat order (POST /fiat/stripe/payment, svc_orderFiatPlan) instead",
            code=FIAT_PLAN_NEEDS_CHECKOUT,
        )
    with store.tx():
        return _record_order(store, plan, buyer, "crypto")


def create_checkout(store: Store, plan: Plan, buyer: str, origin: str) -> dict[str, Any]:
    """``POST /fiat/stripe/payment``: a local checkout link that completes the order once."""
    if plan.is_crypto:
        raise bad_request(
            "This plan is priced in crypto and has no card checkout",
            "Order it with POST /protocol/plans/{planId}/order (svc_orderPlan)",
            code=CRYPTO_PLAN_NOT_FIAT,
        )
    _check_orderable(store, plan, buyer)
    session_id = "cs_test_" + random_hex(16)
    now = store.now()
    reference = str(uuid.uuid4())
    with store.tx():
        store.run(
            "INSERT INTO checkouts (id, plan_id, buyer, client_ref, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, plan.id, buyer, reference, now, now + CHECKOUT_TTL_SECS),
        )
    return {
        "stripeCheckoutSessionId": session_id,
        "checkoutLink": f"{origin}/sandbox/checkout/{session_id}",
        "clientReferenceId": reference,
        "paymentStatus": "unpaid",
        "linkCreatedAt": int(now),
        "linkExpiresAt": int(now + CHECKOUT_TTL_SECS),
    }


def complete_checkout(store: Store, session_id: str) -> tuple[Plan, bool]:
    """Pay a checkout; ``(plan, True)`` the first time, ``(plan, False)`` when already paid."""
    row = store.one("SELECT * FROM checkouts WHERE id = ?", (session_id,))
    if row is None:
        raise ApiError(404, CHECKOUT_NOT_FOUND, "No such checkout session")
    plan = require_plan(store, row["plan_id"])
    if row["completed_at"] is not None:
        return plan, False
    if row["expires_at"] <= store.now():
        raise ApiError(410, CHECKOUT_EXPIRED, "This checkout link expired", "Order the plan again")
    with store.tx():
        tx = _record_order(store, plan, row["buyer"], "fiat")
        store.run(
            "UPDATE checkouts SET completed_at = ?, tx = ? WHERE id = ?",
            (store.now(), tx, session_id),
        )
    return plan, True


def mint(
    store: Store, plan: Plan, caller: str, receiver: str, amount: int, duration: int | None
) -> str:
    """Owner-only minting; ``duration`` makes the credits expire (time plans always do)."""
    if plan.owner != caller:
        raise not_owner("plan")
    if duration is None and plan.is_time:
        duration = plan.duration_secs
    with store.tx():
        return _grant(store, plan, receiver, amount, "mint", duration)
