"""Metered calls under ``"human"`` approval: within a mandate, or once the person approved.

Without a mandate that covers the call (or beyond what it has left) the tool does not run and
nothing is minted: the model gets a block result with a code; once the person types
``/svc_approve <code>`` and confirms, the same call (same user, tool and arguments) goes through
once, its delegation able to buy only the top-up the code named.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ...approvals.gate import ApprovalNeeded, Ticket, model_ticket
from ...approvals.money import PlanValue, format_money, plan_value
from ...approvals.quotes import pending_result, quote_of
from ...host import ToolCallContext
from ...safe_text import NAME_LIMIT, one_line, quoted

if TYPE_CHECKING:
    from ...account.core import PluginCore


def grant_key(payer: PluginCore, ctx: ToolCallContext) -> str:
    """The same call of the same user: account, caller, tool and arguments."""
    caller = ctx.caller.identity if ctx.caller is not None else ""
    arguments = json.dumps(ctx.arguments, sort_keys=True, default=repr)
    return "\x00".join((payer.identity or "", caller, ctx.tool_name, arguments))


async def metered_ticket(
    payer: PluginCore, ctx: ToolCallContext, plan_id: str, credits: int
) -> Ticket:
    """The gate's ticket for one metered call: ``"model"`` mode's; within a mandate or a code
    the person approved for this very call; else :class:`ApprovalNeeded`."""
    approvals = payer.approvals
    if approvals is None or not approvals.human:
        return model_ticket(payer.config, "tool", plan_id)
    plan = await payer.public_client().get_plan(plan_id)
    key = grant_key(payer, ctx)
    caller = ctx.caller.identity if ctx.caller is not None else ""
    granted = approvals.take_grant(key)
    if granted is not None:
        return approvals.approved_ticket(granted, plan_value(plan), approvals.who(payer, caller))

    async def ask(value: PlanValue, amount: int, top_up: bool) -> ApprovalNeeded:
        name = quoted(plan.name, NAME_LIMIT)
        summary = (
            f"run {one_line(ctx.tool_name, 100)} for {credits} credit"
            f"{'s' if credits != 1 else ''} of plan {name} ({format_money(amount, value.currency)})"
        )
        if top_up:
            summary += ", buying the plan first"
        pending = approvals.add_pending(
            payer, "tool", plan, amount, value.currency, summary, grant_key=key, caller=caller,
            top_up=top_up,
        )  # fmt: skip
        message = (
            f"{ctx.tool_name} is a paid tool and did not run; nothing was charged. On this "
            f"gateway the user consents to paying: tell them it would {summary}. Once they "
            "approve, call it again with the same arguments; /svc_allow <amount> per day lets "
            "paid tools run without a code."
        )
        return ApprovalNeeded(pending_result(pending, quote_of(plan), message), pending)

    return await approvals.ticket(payer, plan, None, credits, kind="tool", ask=ask, caller=caller)


def approval_block(exc: ApprovalNeeded) -> dict[str, Any]:
    """The block result's details: the pending purchase, as the model sees it."""
    return {k: v for k, v in exc.result.items() if k != "message"}
