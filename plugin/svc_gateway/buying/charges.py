"""What a query cost: the one deadline and its message, the balance read before and after."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..account.core import PluginCore
from ..approvals.gate import Ticket
from ..chat.failure import ToolFailure
from ..safe_text import credits_text
from ..service.errors import ServiceError

#: how long the balance read back after a failed paid request may take, past the deadline
READBACK_SECS = 5.0
#: httpx's own timeouts sit this far past the query's deadline, which always ends first
HTTPX_SLACK_SECS = 5.0


@dataclass
class Step:
    """Where a query stands: whom it is waiting for (``dns``, ``agent`` or ``service``),
    whether the payment token has gone out, and the balance just before it did."""

    waiting: str = "dns"
    token_sent: bool = False
    plan_id: str = ""
    balance_before: int | None = None
    #: the query's mandate reservation or approval (``"human"`` approval), if any
    ticket: Ticket | None = None
    #: sends of the paid request after the first (its answer lost in flight: :mod:`.retrying`)
    retries: int = 0

    def done(self, core: PluginCore) -> None:
        """Once the token went out the request may have been charged, whatever came back: the
        balance context reads the balance afresh."""
        if self.token_sent:
            core.spent(self.plan_id)


def timed_out(step: Step, deadline: float, url: str) -> ToolFailure:
    """The deadline passed: say whom the query was waiting for, and whether anything was paid
    (only before the token went out is "nothing was paid" known without asking)."""
    if step.token_sent:
        return ToolFailure(
            "agent_timeout",
            f"The agent at {url} did not answer within {deadline:g} s after it was sent the "
            "payment token",
            "Raise requestTimeoutSecs for slow agents.",
        )
    if step.waiting == "dns":
        host = urlsplit(url).hostname
        return ToolFailure(
            "agent_unreachable",
            f"The agent's host {host} could not be resolved within {deadline:g} s; nothing "
            "was paid",
            "Check the host name in agentUrl, or retry when name resolution works again.",
        )
    if step.waiting == "service":
        return ToolFailure(
            "service_timeout",
            f"The service did not answer within {deadline:g} s; nothing was paid",
            "Retry in a moment; raise requestTimeoutSecs if the service is slow.",
        )
    return ToolFailure(
        "agent_timeout",
        f"The agent at {url} did not answer within {deadline:g} s; nothing was paid",
        "Check that the agent is running and that agentUrl is its paid endpoint; for a slow "
        "agent raise requestTimeoutSecs (it bounds the whole query: agent card, HEAD and the "
        "paid request).",
    )


async def read_balance(core: PluginCore, plan_id: str) -> int | None:
    """The service's balance of ``plan_id`` for this account, or ``None`` when it cannot say
    within :data:`READBACK_SECS`."""
    try:
        async with asyncio.timeout(READBACK_SECS):
            return (await core.client().get_plan_balance(plan_id)).balance
    except (ServiceError, TimeoutError):
        return None


def _person_approves(core: PluginCore) -> bool:
    """Purchases are the person's to approve (``"human"`` mode), not the delegation's limit."""
    approvals = getattr(core, "approvals", None)
    return approvals is not None and bool(approvals.human)


def _credits(n: int) -> str:
    return f"{n} credit" + ("" if n == 1 else "s")


async def with_charge(
    core: PluginCore, step: Step, failure: ToolFailure, *, answered: bool
) -> ToolFailure:
    """``failure`` (the agent was sent the token and gave no answer) plus what the service
    says it cost: the balance read back against the one read just before the token went out.
    ``answered``: the agent's HTTP answer came back whole, so it will not settle later."""
    before, after = step.balance_before, await read_balance(core, step.plan_id)
    message, hint = failure.message, failure.hint
    if before is None or after is None:
        message += (
            "; whether it was charged is not known: your balance could not be read from the service"
        )
        hint = f"Check svc_checkBalance before retrying. {hint}"
    elif after == before and answered:
        message += f"; the service shows nothing was charged (balance {credits_text(after)})"
    elif after == before:
        message += (
            f"; the service shows nothing charged so far (balance {credits_text(after)}), but the "
            "agent holds the payment token and could still settle it"
        )
        hint = f"Check svc_checkBalance in a minute before retrying. {hint}"
    elif after < before:
        message += (
            f"; the service shows {_credits(before - after)} charged for it (balance "
            f"{before} -> {credits_text(after)})"
        )
        hint = (
            "The agent was paid and gave no answer: a retry pays again. Tell the agent's owner "
            "(the charge is in your plan's history), or use another agent."
        )
    else:
        message += (
            f"; your balance went from {before} to {credits_text(after)}: the token's delegation "
            "bought the plan again (automatic top-up) during the request, so what the request "
            "burned cannot be told from the balance"
        )
        hint = "Check svc_checkBalance before retrying: " + (
            "a top-up is charged within what you approved (/svc_spend lists it)."
            if _person_approves(core)
            else "a top-up is charged to your delegation, up to its spending limit "
            "(defaultSpendingLimitCents)."
        )
    return ToolFailure(failure.code, message, hint)


async def balance_after(
    core: PluginCore, plan_id: str, result: dict[str, Any], before: int | None = None
) -> None:
    """The service's balance after the call: the number that counts, whatever a receipt says
    (and a rise over ``before``, read just before paying, is a top-up said out loud)."""
    warnings: list[str] = result.setdefault("warnings", [])
    balance = await read_balance(core, plan_id)  # bounded: the answer is not held back long
    if balance is None:
        result["balanceAfter"] = None
        warnings.append("Could not read your balance from the service after the call.")
        return
    result["balanceAfter"] = str(balance)
    receipt = result.get("receipt") or {}
    if before is not None and balance > before:
        try:
            redeemed = int(str(receipt.get("creditsRedeemed") or 0))
        except ValueError:
            redeemed = 0
        bought = balance - before + max(redeemed, 0)  # the top-up came before the burn
        result["topUp"] = record_top_up(core, plan_id, before, balance, bought)
        within = (
            "within what you approved (your /svc_allow mandate or the code you typed)"
            if _person_approves(core)
            else "charged to the token's delegation within its spending limit "
            "(defaultSpendingLimitCents)"
        )
        warnings.append(
            f"This request bought the plan (automatic top-up: {bought} credits, "
            f"{within}); then it used {redeemed}: your balance went from {before} to "
            f"{balance} credits. /svc_spend lists the purchase and its price."
        )
    claimed = receipt.get("remainingBalance")
    if claimed is not None and claimed != str(balance):
        warnings.append(
            f"The agent's receipt says {credits_text(claimed)} "
            f"{'remains' if claimed == '1' else 'remain'}; the service says {balance}."
        )


def record_top_up(
    core: PluginCore, plan_id: str, before: int, after: int, bought: int | None = None
) -> dict[str, Any]:
    """A top-up the query's delegation made: kept as a receipt (``/svc_spend`` lists it) and
    named in the result. ``bought``: the credits it bought (the rise in balance plus what the
    request burned after it), else the rise."""
    bought = after - before if bought is None else bought
    sink = getattr(core, "receipt_sink", None)
    if sink is not None and core.session is not None:
        sink(
            what="plan bought by automatic top-up",
            payer=core.session.address,
            identity=core.identity,
            plan_id=plan_id,
            credits=bought,
            transaction=None,
            status="top-up",
            at=time.time(),
        )
    return {
        "planId": plan_id,
        "balanceBefore": str(before),
        "balanceAfter": str(after),
        "creditsBought": str(bought),
    }
