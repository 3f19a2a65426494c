"""What a plan's credits are worth: its currency and the price of one credit, in micro-units."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..service.models import Plan

#: every amount the approvals keep is an integer of millionths of its currency
MICRO = 1_000_000
#: tokens that are worth their currency one for one
_SAME_AS = {"USDC": "USD", "EURC": "EUR"}


def currency_of(label: str) -> str:
    """``USDC`` counts as ``USD`` (and ``EURC`` as ``EUR``): a mandate in dollars pays both."""
    upper = label.strip().upper()
    return _SAME_AS.get(upper, upper)


@dataclass(frozen=True)
class PlanValue:
    """A plan's price in micro-units of ``currency`` and the credits (or access) it grants."""

    currency: str
    price_micro: int
    credits: int
    is_time: bool

    def credits_micro(self, credits: int) -> int:
        """What ``credits`` are worth at the plan's price per credit (rounded up)."""
        if self.is_time or self.credits <= 0:
            return 0
        return -(-self.price_micro * credits // self.credits)


def plan_value(plan: Plan) -> PlanValue:
    """The plan's currency and price, from the service's own data."""
    from ..service.pricing import FIAT_DECIMALS, token_unit  # pricing loads the wire models

    price = plan.registry.price
    total = sum(price.amounts)
    if plan.is_crypto:
        label, decimals = token_unit(price.token_address)
    else:
        label = plan.metadata.plan.currency or "usd"
        decimals = FIAT_DECIMALS
    micro = int((Decimal(total).scaleb(-decimals) * MICRO).to_integral_value(ROUND_CEILING))
    credits = plan.registry.credits
    return PlanValue(currency_of(label), micro, credits.amount, plan.is_time_plan)


def per_request_credits(plan: Plan) -> int:
    """The most credits one request of the plan may redeem (what a query reserves)."""
    credits = plan.registry.credits
    return max(credits.max_amount, credits.min_amount, 1)


def to_micro(amount: Decimal) -> int:
    return int((amount * MICRO).to_integral_value(ROUND_FLOOR))


def cents_floor(micro: int) -> int:
    """Whole cents in ``micro`` (a delegation's limit never rounds up past the mandate)."""
    return max(micro, 0) // 10_000


def cents_ceiling(micro: int) -> int:
    return -(-max(micro, 0) // 10_000)


def format_money(micro: int, currency: str) -> str:
    """``1500000, USD`` -> ``1.50 USD`` (more decimals only when they matter)."""
    value = Decimal(micro).scaleb(-6)
    text = f"{value:.2f}" if value == value.quantize(Decimal("0.01")) else f"{value.normalize():f}"
    return f"{text} {currency}"
