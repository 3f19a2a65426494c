"""The credits ledger: orders, fiat checkouts, mints, balances and burns.

Each holder of a plan has one ``balances`` row (non-expiring credits left, granted and burned
totals, time-plan access) and one ``buckets`` row per live expiring grant. Every grant and
burn updates them in the same transaction, so reading or spending a balance costs the same
after a million settles as after one. The append-only ``grants`` and ``burns`` tables are
the audit trail: written on every change, read only by :func:`audit` (never on a hot path),
so "granted = balance + burned + expired" stays checkable.
"""

from __future__ import annotations

import json
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
    NO_CREDITS,
    REQUEST_MISMATCH,
    TRIAL_ALREADY_USED,
    ApiError,
    bad_request,
    not_owner,
)
from .plans import Plan, require_plan
from .tokens import random_hex, tx_hash

CHECKOUT_TTL_SECS = 3600.0
#: Access that never lapses (the last second of year 9999).
FOREVER = 253402300799.0


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


def _row(store: Store, plan_id: str, holder: str) -> tuple[int, int, int, float | None]:
    row = store.one(
        "SELECT plain, granted, burned, access_until FROM balances "
        "WHERE plan_id = ? AND holder = ?",
        (plan_id, holder),
    )
    if row is None:
        return 0, 0, 0, None
    return int(row["plain"]), int(row["granted"]), int(row["burned"]), row["access_until"]


def _live_buckets(store: Store, plan_id: str, holder: str, now: float) -> list[tuple[int, int]]:
    """``(bucket id, credits left)`` of unexpired expiring grants, soonest expiry first."""
    rows = store.all(
        "SELECT id, remaining FROM buckets WHERE plan_id = ? AND holder = ? AND expires_at > ? "
        "ORDER BY expires_at, id",
        (plan_id, holder, now),
    )
    return [(int(r["id"]), int(r["remaining"])) for r in rows]


def holding(store: Store, plan: Plan, holder: str) -> Holding:
    """One row plus the holder's live buckets: O(1) in the number of past settles."""
    now = store.now()
    plain, granted, burned, access_until = _row(store, plan.id, holder)
    remaining = plain + sum(left for _, left in _live_buckets(store, plan.id, holder, now))
    return Holding(granted, burned, remaining, access_until, plan.is_time, now)


def balance_view(store: Store, plan: Plan, holder: str) -> dict[str, Any]:
    """The balance object (WIRE.md §2.2)."""
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
    """Sandbox-only audit numbers: ``granted = balance + burned + expired`` (credits plans).

    ``auditGranted`` and ``auditBurned`` are summed from the append-only trail, so a test
    can check the running totals against the history they summarise.
    """
    state = holding(store, plan, holder)
    trail = audit(store, plan.id, holder)
    return {
        "planId": plan.id,
        "holderAddress": holder,
        "planType": plan.kind,
        "granted": str(state.granted),
        "expired": str(state.expired),
        "burned": str(state.burned),
        "balance": str(state.balance),
        "auditGranted": str(trail[0]),
        "auditBurned": str(trail[1]),
    }


def audit(store: Store, plan_id: str, holder: str) -> tuple[int, int]:
    """Granted and burned totals summed from the append-only trail (slow; audits only)."""
    granted = sum(
        int(r["amount"])
        for r in store.all(
            "SELECT amount FROM grants WHERE plan_id = ? AND holder = ?", (plan_id, holder)
        )
    )
    burned = sum(
        int(r["amount"])
        for r in store.all(
            "SELECT amount FROM burns WHERE plan_id = ? AND holder = ?", (plan_id, holder)
        )
    )
    return granted, burned


def _save_row(
    store: Store, plan_id: str, holder: str, row: tuple[int, int, int, float | None]
) -> None:
    plain, granted, burned, access_until = row
    store.run(
        "INSERT INTO balances (plan_id, holder, plain, granted, burned, access_until) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (plan_id, holder) DO UPDATE SET "
        "plain = excluded.plain, granted = excluded.granted, burned = excluded.burned, "
        "access_until = excluded.access_until",
        (plan_id, holder, str(plain), str(granted), str(burned), access_until),
    )


def grant(
    store: Store, plan: Plan, holder: str, amount: int, source: str, duration: int | None
) -> str:
    """Add credits (or, for time plans, extend access); returns the transaction hash.

    ``duration`` makes the credits expire that many seconds from now (a bucket); a time
    plan's access is extended from its current end when still active.
    """
    now = store.now()
    tx = tx_hash()
    with store.tx():
        plain, granted, burned, access_until = _row(store, plan.id, holder)
        expires: float | None = None
        if duration:
            # A uint256 duration is kept exact in the plan; its expiry stops at FOREVER.
            expires = min(now + duration, FOREVER)
            if plan.is_time:
                if access_until is not None and access_until > now:
                    expires = min(access_until + duration, FOREVER)
                access_until = expires
            else:
                store.run(
                    "INSERT INTO buckets (plan_id, holder, expires_at, remaining) "
                    "VALUES (?, ?, ?, ?)",
                    (plan.id, holder, expires, str(amount)),
                )
        elif plan.is_time:
            access_until = FOREVER  # a non-expirable time plan
        else:
            plain += amount
        _save_row(store, plan.id, holder, (plain, granted + amount, burned, access_until))
        store.run(
            "INSERT INTO grants (plan_id, holder, amount, expires_at, source, tx, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (plan.id, holder, str(amount), expires, source, tx, now),
        )
    return tx


def burn(store: Store, plan: Plan, holder: str, amount: int, request_id: str | None) -> str:
    """Spend ``amount`` credits, soonest-expiring first; the caller checked the balance.

    Raises :class:`ValueError` if the holder has fewer credits (never a negative balance),
    before changing anything: a caller that catches it inside its own transaction (settle does)
    must not commit half a burn.
    """
    tx = tx_hash()
    if amount <= 0:
        return tx
    now = store.now()
    with store.tx():
        plain, granted, burned, access_until = _row(store, plan.id, holder)
        live = list(_live_buckets(store, plan.id, holder, now))
        if sum(remaining for _, remaining in live) + plain < amount:
            raise ValueError("insufficient credits")
        left = amount
        for bucket_id, remaining in live:
            spent = min(remaining, left)
            left -= spent
            if spent == remaining:
                store.run("DELETE FROM buckets WHERE id = ?", (bucket_id,))
            else:
                store.run(
                    "UPDATE buckets SET remaining = ? WHERE id = ?",
                    (str(remaining - spent), bucket_id),
                )
            if not left:
                break
        plain -= left  # left <= plain: checked above
        store.run(
            "DELETE FROM buckets WHERE plan_id = ? AND holder = ? AND expires_at <= ?",
            (plan.id, holder, now),
        )
        _save_row(store, plan.id, holder, (plain, granted, burned + amount, access_until))
        store.run(
            "INSERT INTO burns (plan_id, holder, amount, request_id, tx, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (plan.id, holder, str(amount), request_id, tx, now),
        )
    return tx


def check_orderable(store: Store, plan: Plan, buyer: str) -> None:
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


def record_order(store: Store, plan: Plan, buyer: str, kind: str) -> str:
    check_orderable(store, plan, buyer)
    tx = grant(store, plan, buyer, plan.credits_amount, kind, plan.duration_secs or None)
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
        return record_order(store, plan, buyer, "crypto")


def create_checkout(store: Store, plan: Plan, buyer: str, origin: str) -> dict[str, Any]:
    """``POST /fiat/stripe/payment``: a local checkout link that completes the order once."""
    if plan.is_crypto:
        raise bad_request(
            "This plan is priced in crypto and has no card checkout",
            "Order it with POST /protocol/plans/{planId}/order (svc_orderPlan)",
            code=CRYPTO_PLAN_NOT_FIAT,
        )
    check_orderable(store, plan, buyer)
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
        tx = record_order(store, plan, row["buyer"], "fiat")
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
    return grant(store, plan, receiver, amount, "mint", duration)


def _spend_checked(store: Store, plan: Plan, holder: str, amount: int, request: str | None) -> str:
    state = holding(store, plan, holder)
    if plan.is_time:
        raise bad_request(
            "Time plans have no credits to burn or redeem", "Use a credits plan", code=NO_CREDITS
        )
    if state.balance < amount:
        raise ApiError(
            400,
            NO_CREDITS,
            f"Insufficient credits: {state.balance} available, {amount} requested",
            "Order the plan or mint credits first",
        )
    return burn(store, plan, holder, amount, request)


def burn_own(store: Store, plan: Plan, holder: str, amount: int) -> str:
    """``POST /protocol/plans/burn``: the caller burns credits it holds on the plan."""
    with store.tx():
        return _spend_checked(store, plan, holder, amount, None)


def redeem(
    store: Store, plan: Plan, caller: str, request_id: str, holder: str, amount: int
) -> dict[str, Any]:
    """``POST /protocol/plans/redeem``: the plan owner burns a holder's credits for one
    agent request; a replay of the same ``agentRequestId`` returns the first answer."""
    if plan.owner != caller:
        raise not_owner("plan (only the plan owner redeems its credits)")
    with store.tx():
        row = store.one(
            "SELECT plan_id, holder, answer FROM redemptions WHERE agent_request_id = ?",
            (request_id,),
        )
        if row is not None:
            if (row["plan_id"], row["holder"]) != (plan.id, holder):
                raise bad_request(
                    "This agentRequestId was already redeemed for another plan or holder",
                    "Use a new agentRequestId for a new request",
                    code=REQUEST_MISMATCH,
                )
            stored: dict[str, Any] = json.loads(row["answer"])
            return stored
        tx = _spend_checked(store, plan, holder, amount, request_id)
        answer = {"success": True, "txHash": tx, "amount": str(amount)}
        store.run(
            "INSERT INTO redemptions (agent_request_id, plan_id, holder, answer) "
            "VALUES (?, ?, ?, ?)",
            (request_id, plan.id, holder, json.dumps(answer)),
        )
    return answer
