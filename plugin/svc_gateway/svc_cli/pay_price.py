"""What ``svc pay`` costs and who approves it: ``--max-price``, the plan's price for this
request (the plan bought first when the balance is short), and the prompt that asks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

import click

from .errors import BadUsage, Refused

if TYPE_CHECKING:
    from ..account.core import PluginCore
    from ..service.models import Plan

_MONEY = re.compile(r"^\s*\$?\s*(\d+(?:\.\d+)?)\s*([A-Za-z]{3,4})?\s*$")


@dataclass(frozen=True)
class Cap:
    """``--max-price``: an amount in millionths, and its currency when one was named."""

    micro: int
    currency: str | None


def read_cap(ctx: click.Context, param: click.Parameter, value: str | None) -> Cap | None:
    """``$1.50``, ``1.5 USD``, ``0.25 USDC`` or a bare ``2``: the most this run may spend."""
    if value is None:
        return None
    from ..approvals.money import currency_of, to_micro

    match = _MONEY.match(value)
    try:
        amount = Decimal(match.group(1)) if match else None
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        amount = None
    if match is None or amount is None:
        raise click.BadParameter(f"{value[:30]!r} is not an amount such as '$1.00' or '0.5 USDC'")
    named = match.group(2) or ("USD" if value.strip().startswith("$") else None)
    return Cap(to_micro(amount), currency_of(named) if named else None)


@dataclass
class Priced:
    """What the person approves: the plan, what this request may cost and whether the plan
    must be bought first."""

    plan: Plan
    per_request: int
    balance: int
    order: bool
    cost_micro: int
    currency: str

    def describe(self, agent_id: str, url: str) -> str:
        from ..approvals.money import format_money
        from ..approvals.quotes import quote_of
        from ..safe_text import plural

        quote = quote_of(self.plan)
        name = quote["planName"]
        if self.plan.is_time_plan:
            cost = f"with access on plan '{name}'"
        else:
            value = format_money(self.cost_micro if not self.order else 0, self.currency)
            cost = f"up to {plural(self.per_request, 'credit')} of plan '{name}'" + (
                "" if self.order else f" (worth {value}; you hold {self.balance})"
            )
        text = f"Pay agent {agent_id} at {url} {cost}"
        if self.order:
            text += (
                f", buying the plan first for {quote['price']} ({quote['grants']}; "
                f"you hold {plural(self.balance, 'credit')})"
            )
        return text


async def price_of(core: PluginCore, plan_id: str) -> Priced:
    from ..approvals.money import per_request_credits, plan_value

    client = core.client()
    plan = await client.get_plan(plan_id)
    held = await client.get_plan_balance(plan_id)
    value = plan_value(plan)
    per = per_request_credits(plan)
    order = not held.is_subscriber if plan.is_time_plan else held.balance < per
    cost = value.price_micro if order else value.credits_micro(per)
    return Priced(plan, per, held.balance, order, cost, value.currency)


def approve(priced: Priced, text: str, yes: bool, cap: Cap | None) -> None:
    """The person's approval: within ``--max-price``, ``--yes``, or a typed yes."""
    from ..approvals.money import format_money

    cost = format_money(priced.cost_micro, priced.currency)
    if cap is not None:
        if cap.currency not in (None, priced.currency):
            raise BadUsage(
                f"--max-price is in {cap.currency} but this plan is paid in {priced.currency}; "
                "nothing was paid"
            )
        if priced.cost_micro > cap.micro:
            raise Refused(
                f"{text}: {cost}, more than --max-price {format_money(cap.micro, priced.currency)}"
                "; nothing was paid",
                code="over_max_price",
            )
        return
    if yes:
        return
    click.echo(f"{text}.", err=True)
    try:
        agreed = click.confirm(f"Pay {cost}?", default=False, err=True)
    except click.Abort:
        agreed = False
    if not agreed:
        raise Refused(
            "Not paid: not confirmed (pass --yes, or --max-price AMOUNT, to approve without "
            "being asked)",
            code="not_confirmed",
        )
