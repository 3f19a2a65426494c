"""Orders and bare tokens in ``"human"`` approval mode: what the person approves with a code.

``confirm: true`` then buys nothing: the model gets the plugin's own quote and the code, the
person types ``/svc_approve <code>`` (and confirms what the plugin shows them) and the order is
placed; for a card plan the checkout link goes to the person in that reply, never into the
model's result. ``svc_getAccessToken`` is money too: its token comes from a ticket of the
spending gate, within a mandate or once approved (:func:`token_ticket`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..account.core import PluginCore
from ..approvals.gate import CALLER, ApprovalNeeded, Ticket, model_ticket
from ..approvals.money import PlanValue, format_money, per_request_credits, plan_value
from ..approvals.quotes import pending_result, quote_of
from ..safe_text import NAME_LIMIT, credits_text, quoted
from ..service.models import Plan


def person_approves(core: PluginCore) -> bool:
    """The person, not the model, approves purchases on this gateway."""
    return core.approvals is not None and core.approvals.human


def ask_to_order(
    core: PluginCore,
    plan: Plan,
    *,
    by_card: bool,
    place: Callable[[], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """The pending order the model is shown; approving it runs ``place`` and tells the
    person what was bought (or, for a card plan, the checkout link)."""
    assert core.approvals is not None
    value = plan_value(plan)
    quote = quote_of(plan)
    name = quoted(plan.name, NAME_LIMIT)

    async def approved() -> str:
        done = await place()
        if by_card:
            return (
                f"Approved: open this checkout link to pay {done['price']} for plan {name}; "
                f"credits arrive once payment completes: {done['checkoutUrl']}"
            )
        tx = f" (transaction {done['txHash']})" if done.get("txHash") else ""
        return (
            f"Approved: bought plan {name} for {done['price']}{tx}. Your balance on it: "
            f"{credits_text(done['balance'])}."
        )

    pending = core.approvals.add_pending(
        core,
        "card_order" if by_card else "order",
        plan,
        value.price_micro,
        value.currency,
        f"order plan {name} for {quote['price']} ({quote['grants']})",
        action=approved,
    )
    message = (
        "Nothing was bought: on this gateway the user approves purchases, not the assistant. "
        f"Tell the user the quote (plan {name}, {quote['price']} for {quote['grants']})."
    )
    if by_card:
        message += " Once they approve, the checkout link goes to them directly."
    return pending_result(pending, quote, message)


def order_ticket(core: PluginCore, plan_id: str, *, by_card: bool) -> Ticket:
    """The gate's ticket for an order: ``"model"`` mode's, or the person's approved code's."""
    kind = "card_order" if by_card else "order"
    if core.approvals is None:
        return model_ticket(core.config, kind, plan_id)
    return core.approvals.order_ticket(core, plan_id, kind)


def token_grant_key(core: PluginCore, plan_id: str, agent_id: str | None, payment_type: str) -> str:
    """The same token asked for again by the same user: account, caller, plan, agent, type."""
    parts = (core.identity or "", CALLER.get(), "svc_getAccessToken", plan_id, agent_id or "")
    return "\x00".join((*parts, payment_type))


async def token_ticket(
    core: PluginCore, plan: Plan, agent_id: str | None, payment_type: str
) -> Ticket:
    """The gate's ticket for a bare token: ``"model"`` mode's; else the person's approval of
    this very token (asked again after ``/svc_approve``) or a reservation in their mandates;
    else :class:`ApprovalNeeded`. Its token can back one settle of at most one request's
    credits, and buy the plan again only when that was approved."""
    approvals = core.approvals
    if approvals is None or not approvals.human:
        return model_ticket(core.config, "token", plan.id)
    key = token_grant_key(core, plan.id, agent_id, payment_type)
    granted = approvals.take_grant(key)
    if granted is not None:
        return approvals.approved_ticket(granted, plan_value(plan), approvals.who(core))

    async def ask(value: PlanValue, amount: int, top_up: bool) -> ApprovalNeeded:
        quote = quote_of(plan)
        per = per_request_credits(plan)
        summary = (
            f"give the assistant a payment token for agent {agent_id or '(any)'} that can pay "
            "one request "
            f"of up to {per} credit{'s' if per != 1 else ''} of plan "
            f"{quoted(plan.name, NAME_LIMIT)} ({format_money(amount, value.currency)})"
        )
        if top_up:
            summary += f", buying the plan first for {quote['price']} ({quote['grants']})"
        pending = approvals.add_pending(
            core, "token", plan, amount, value.currency, summary, grant_key=key, top_up=top_up
        )
        message = (
            "No token was made: on this gateway a payment token is money and needs the user's "
            f"consent. Tell the user it would {summary}. Once they approve, call "
            "svc_getAccessToken again with the same arguments."
        )
        return ApprovalNeeded(pending_result(pending, quote, message), pending)

    return await approvals.ticket(core, plan, agent_id, kind="token", ask=ask)
