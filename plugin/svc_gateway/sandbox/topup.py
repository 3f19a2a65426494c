"""Automatic top-up: a settle short of credits orders the plan through the token's delegation.

The service lets a token backed by a delegation pay for the plan itself (payments_py
``x402/types.py`` ``SettleResponse.order_tx``: "transaction hash of the order operation if
auto top-up occurred"). The sandbox emulates it: verify (a dry run) counts what one order
through the delegation would add, and settle, inside the burn's transaction, records that
order (a grant like any other, so conservation holds) and charges its price to the
delegation's ``spendingLimitCents``. One settle buys at most one order.

What the delegation cannot pay is refused with 403 ``BCK.X402.0023`` (delegation budget
insufficient, WIRE.md §4), with nothing burned or ordered; a plan that cannot be ordered at
all (a used trial, ``maxOrders`` reached) fails the settle with ``"Cannot order plan: …"``,
the reason the service gives (payments TypeScript e2e ``test_x402_e2e.test.ts``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .db import Store
from .delegations import Delegation, charge
from .errors import DELEGATION_BUDGET, DELEGATION_EXPIRED, ApiError
from .ledger import check_orderable, holding, record_order
from .plans import Plan

#: The price units a delegation budget in cents can pay, and the currency it must be in.
CENT_CURRENCIES = {"USDC": "usdc", "EURC": "eurc", "USD": "usd", "EUR": "eur"}


@dataclass(frozen=True)
class Shortfall:
    """Why a payer cannot pay now: ``kind`` ``budget`` (403 ``BCK.X402.0023``), ``expired``
    (403 ``BCK.X402.0013``), ``order`` (the plan cannot be ordered) or ``credits``."""

    kind: str
    reason: str
    #: What the balance lacks, e.g. ``insufficient credits: 0 available, 2 requested``.
    short: str = ""

    @property
    def invalid_reason(self) -> str:
        """The verify ``invalidReason`` / settle ``errorReason``."""
        if self.kind == "credits":
            return self.reason
        if not self.short:
            return f"the delegation cannot pay: {self.reason}"
        return f"{self.short}, and the plan cannot be ordered for it: {self.reason}"

    def refusal(self) -> ApiError:
        code = DELEGATION_EXPIRED if self.kind == "expired" else DELEGATION_BUDGET
        return ApiError(
            403,
            code,
            f"Cannot order plan: {self.reason} ({self.short})"
            if self.short
            else f"The delegation cannot pay: {self.reason}",
            "Withhold the answer; the buyer must order the plan or mint a token from a "
            "delegation that can still pay (spendingLimitCents, maxTransactions, expiry)",
        )


def price_cents(plan: Plan) -> int | None:
    """The plan's price in cents of its currency, rounded up as the service charges it (1.005
    USDC costs 101 cents); ``None`` when a cents budget cannot pay it."""
    total = plan.total_price
    if total == 0:
        return 0
    label, decimals = plan.unit()
    if label not in CENT_CURRENCIES:
        return None
    return int(-(-total * 100 // 10**decimals))  # rounded up: never undercharge the budget


def _payable(plan: Plan, delegation: Delegation, now: float) -> Shortfall | None:
    """Whether ``delegation`` can pay for one order of ``plan`` now (``maxTransactions`` is
    checked for every settle by the facilitator, top-up or not)."""
    if delegation.expires_at <= now:
        return Shortfall("expired", "the delegation expired")
    cents = price_cents(plan)
    label, _ = plan.unit()
    if cents is None:
        return Shortfall(
            "budget", f"the plan is priced in {label}, which a delegation budget cannot pay"
        )
    if cents and CENT_CURRENCIES[label] != delegation.currency:
        return Shortfall(
            "budget",
            f"the plan is priced in {label} and the delegation pays in {delegation.currency}",
        )
    left = delegation.remaining_cents
    if cents > left:
        return Shortfall(
            "budget",
            f"the plan costs {cents} cents and the delegation has {left} of its "
            f"{delegation.spending_limit_cents} cents left",
        )
    return None


def shortfall(
    store: Store, plan: Plan, payer: str, amount: int, delegation: Delegation
) -> tuple[Shortfall | None, bool]:
    """``(why the payer cannot pay amount, whether one top-up order is needed)``.

    ``(None, False)``: the balance pays; ``(None, True)``: one order through the delegation
    makes it pay; ``(Shortfall, _)``: neither.
    """
    state = holding(store, plan, payer)
    if plan.is_time:
        if state.active:
            return None, False
        short = "no active access to this time plan"
    elif state.balance >= amount:
        return None, False
    else:
        short = f"insufficient credits: {state.balance} available, {amount} requested"
        if state.balance + plan.credits_amount < amount:
            reason = f"{short} (one order of the plan adds {plan.credits_amount})"
            return Shortfall("credits", reason, short), False
    problem = _payable(plan, delegation, store.now())
    if problem is None:
        try:
            check_orderable(store, plan, payer)
        except ApiError as error:
            problem = Shortfall("order", error.message.rstrip("."))
    if problem is not None:
        return Shortfall(problem.kind, problem.reason, short), False
    return None, True


def top_up(store: Store, plan: Plan, payer: str, delegation: Delegation) -> str:
    """Order ``plan`` for ``payer``, charged to ``delegation``; the caller checked it can pay
    and holds the settle's transaction. Returns the order's transaction hash."""
    tx = record_order(store, plan, payer, "topup")
    charge(store, delegation.id, price_cents(plan) or 0)
    return tx
