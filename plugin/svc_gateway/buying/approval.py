"""svc_queryAgent under ``"human"`` approval: within a mandate it pays, else the person is asked.

:func:`query_ticket` is consulted after every check and before the token is minted. Without a
mandate that covers the query (or beyond what it has left) nothing is minted: the model gets a
pending purchase whose code, typed by the person, runs the same query once, its delegation able
to pay at most the top-up the quote named. What a query spent is settled against the mandate
(:func:`finish_ticket`); a top-up that happened is named in the result and kept as a receipt.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from ..account.core import PluginCore
from ..approvals.gate import ApprovalNeeded, Approvals, Ticket, model_ticket, read_credits
from ..approvals.money import PlanValue, format_money, per_request_credits
from ..approvals.quotes import pending_result, quote_of
from ..safe_text import NAME_LIMIT, credits_text, one_line, quoted
from ..service.models import Plan
from .charges import Step, read_balance

#: the most of an agent's answer an approval reply shows the person
ANSWER_SHOWN = 4000


async def query_ticket(
    core: PluginCore,
    plan_id: str,
    agent_id: str | None,
    rerun: Callable[[], Awaitable[dict[str, Any]]],
) -> Ticket:
    """The gate's ticket for one paid query: the configured delegation in ``"model"`` mode;
    else within a mandate or an approved code, or :class:`ApprovalNeeded` (nothing minted,
    nothing paid)."""
    approvals: Approvals | None = getattr(core, "approvals", None)  # a bare test core: none
    if approvals is None or not approvals.human:
        return model_ticket(core.config, "query", plan_id)
    plan = await core.public_client().get_plan(plan_id)

    async def ask(value: PlanValue, amount: int, top_up: bool) -> ApprovalNeeded:
        return await _ask(core, plan, agent_id, value, amount, top_up, rerun)

    return await approvals.ticket(core, plan, agent_id, kind="query", ask=ask)


async def _ask(
    core: PluginCore,
    plan: Plan,
    agent_id: str | None,
    value: PlanValue,
    amount: int,
    short: bool,
    rerun: Callable[[], Awaitable[dict[str, Any]]],
) -> ApprovalNeeded:
    assert core.approvals is not None
    quote = quote_of(plan)
    per = per_request_credits(plan)
    held = await read_credits(core, plan.id)
    name = quoted(plan.name, NAME_LIMIT)
    cost = (
        f"access on plan {name}"
        if plan.is_time_plan
        else f"up to {per} credit{'s' if per != 1 else ''} of plan {name} "
        f"({format_money(amount, value.currency)})"
    )
    summary = f"pay agent {one_line(agent_id or '?', 100)} {cost}"
    if short:
        summary += f", buying the plan first for {quote['price']} ({quote['grants']})"
    quote = {**quote, "creditsPerRequest": per, "balanceHeld": None if held is None else str(held)}

    async def approved() -> str:
        return answer_text(await rerun())

    pending = core.approvals.add_pending(
        core, "query", plan, amount, value.currency, summary, action=approved, top_up=short
    )
    message = (
        "Nothing was paid and the agent was not asked: on this gateway a paid query needs the "
        f"user's consent. Tell the user it would {summary}. With /svc_approve the answer goes "
        "to them; /svc_allow <amount> per day lets queries pay without a code."
    )
    return ApprovalNeeded(pending_result(pending, quote, message), pending)


def answer_text(result: dict[str, Any]) -> str:
    """An approved query's result, for the person: the answer, what it cost, any top-up."""
    answer = result.get("answer")
    text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    if isinstance(answer, dict) and isinstance(answer.get("answer"), str):
        text = answer["answer"]
    receipt = result.get("receipt") or {}
    paid = receipt.get("creditsRedeemed", "?") if isinstance(receipt, dict) else "?"
    lines = [
        f"Approved: agent {one_line(str(result.get('agentId') or '?'), 100)} answered (paid "
        f"{credits_text(paid)}; balance {result.get('balanceAfter')}):",
        text[:ANSWER_SHOWN] + (" [...]" if len(text) > ANSWER_SHOWN else ""),
    ]
    lines += [f"Note: {one_line(w, 300)}" for w in result.get("warnings") or []]
    return "\n".join(lines)


def redeemed(result: dict[str, Any]) -> int | None:
    """The credits the checked receipt says were redeemed (``None``: not known)."""
    receipt = result.get("receipt")
    if not isinstance(receipt, dict):
        return None
    try:
        return int(str(receipt.get("creditsRedeemed")))
    except ValueError:
        return None


def topped_up(result: dict[str, Any]) -> bool | None:
    """Whether the balance read back after the answer shows a top-up (``None``: not read)."""
    return None if result.get("balanceAfter") is None else "topUp" in result


async def finish_ticket(
    core: PluginCore, step: Step, credits: int | None, topped_up: bool | None = None
) -> None:
    """Settle the query's ticket with what it cost; release it when the token never went
    out; count all of it when the cost is not known. ``topped_up``: whether the balance shows
    a top-up (``None``: read it back here)."""
    ticket = step.ticket
    if ticket is None or not ticket.by_person:
        return
    if not step.token_sent:
        await ticket.release()
        return
    if topped_up is None or credits is None:
        after = await read_balance(core, step.plan_id)
        before = step.balance_before
        if after is not None and before is not None:
            topped_up = after > before
            if credits is None and after <= before:  # failed: what the service shows
                credits = before - after
    await ticket.settle(credits, topped_up=topped_up)
