"""Orders in ``"human"`` approval mode: a pending purchase the person approves with a code.

``confirm: true`` then buys nothing: the model gets the plugin's own quote and the code, the
person types ``/svc_approve <code>`` and the order is placed; for a card plan the checkout link
goes to the person in that reply, never into the model's result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..approvals.gate import pending_result, quote_of
from ..approvals.money import plan_value
from ..chat.core import PluginCore
from ..safe_text import NAME_LIMIT, quoted
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
            f"{done['balance']} credits."
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
