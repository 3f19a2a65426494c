"""A metered call's answers besides its tool's: the block of a payment refused (short, or
refused for another reason), the receipts of what it cost (the call, and the plan its
token bought by automatic top-up), which ``/svc_spend`` and ``/svc_earnings`` list, and the
notice a top-up adds to the tool's result, so the person sees what the call bought."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from ...account.receipts import ReceiptBook
from ...approvals.gate import Ticket
from ...approvals.money import format_money
from ...host import Caller, ToolCallContext, ToolResult
from ...redact import get_logger
from ...safe_text import one_line, plural
from ...service import errors
from ...service.models import SCHEME_CARD
from ..state.book import IN_PROGRESS_NOTE
from ..types import PaidOutcome
from .tool_results import block

if TYPE_CHECKING:
    from ...account.core import PluginCore

log = get_logger("svc_gateway.metering")


def who(caller: Caller | None) -> str | None:
    """The chat identity a receipt is kept under (``None``: the gateway's own account)."""
    return caller.identity if caller is not None else None


async def balance(payer: PluginCore, plan_id: str) -> int | None:
    """The payer's balance of ``plan_id`` (``None``: the service cannot say)."""
    try:
        return (await payer.client().get_plan_balance(plan_id)).balance
    except errors.ServiceError:
        return None


async def short_block(
    ctx: ToolCallContext,
    payer: PluginCore,
    plan_id: str,
    price: int,
    reason: str,
    ticket: Ticket | None = None,
) -> ToolResult:
    """The block result of a payment refused: price, balance, how to buy when the balance
    says the payer is short; otherwise the refusal as it is (never "insufficient"). A call
    the person approved with a code that still cannot be paid says so plainly, and what
    else it needs."""
    balance: int | None = None
    fiat = False
    try:
        balance = (await payer.client().get_plan_balance(plan_id)).balance
        plan = await payer.public_client().get_plan(plan_id)
        fiat = plan.scheme == SCHEME_CARD
    except errors.ServiceError:
        pass
    held = IN_PROGRESS_NOTE in reason  # the admission book: their calls in progress
    if not held and (balance is None or balance >= price):
        shown = "could not be read" if balance is None else f"is {balance}"
        return block(
            "payment_refused",
            f"{ctx.tool_name} did not run: the payment for it was not accepted "
            f"({reason[:200]}); your balance on plan {plan_id} {shown}. Nothing was "
            "charged",
            "This is not a shortage of credits: try again, and if it keeps failing, tell "
            "the gateway's operator.",
            price=price,
            balance=balance,
            planId=plan_id,
            reason=reason[:200],
        )
    how = (
        "svc_orderFiatPlan gives you your own checkout link"
        if fiat
        else "svc_orderPlan buys it (it asks you to confirm first)"
    )
    shown = "unknown" if balance is None else str(balance)
    message = (
        f"{ctx.tool_name} costs {price} credit{'s' if price != 1 else ''} per call on plan "
        f"{plan_id}; your balance is {shown}. The tool did not run and nothing was charged"
    )
    hint = f"Buy credits for plan {plan_id}: {how}. Then call {ctx.tool_name} again."
    if ticket is not None and ticket.by_code:
        why = (
            f"the approval covered buying the plan, and that purchase did not go through "
            f"({reason[:200]})"
            if ticket.top_up_micro
            else "the approval covered the call's credits only (the balance held them "
            "when it was asked for), and they were spent since"
        )
        message = f"The person approved this call, but it still cannot be paid: {message}; {why}"
        hint = (
            f"Call {ctx.tool_name} again: its new code names what it needs now (the plan's "
            f"purchase too, when the balance is short), or buy credits first: {how}."
        )
    return block(
        "insufficient_credits",
        message,
        hint,
        price=price,
        balance=balance,
        planId=plan_id,
        reason=reason[:200],
    )


def record_call(
    receipts: ReceiptBook,
    ctx: ToolCallContext,
    payer: PluginCore,
    plan_id: str,
    price: int,
    outcome: PaidOutcome,
) -> None:
    if outcome.settle in (None, "refused"):
        return
    receipt = outcome.receipt or {}
    receipts.add(
        what=f"tool {ctx.tool_name}",
        payer=payer.session.address if payer.session else "",
        identity=who(ctx.caller),
        plan_id=plan_id,
        credits=int(receipt.get("creditsRedeemed") or price),
        transaction=str(receipt.get("transaction") or "") or None,
        status={"paid": "settled", "deferred": "queued"}.get(outcome.settle, "lost"),
        at=time.time(),
        call_id=ctx.call_id,
        request_id=outcome.request_id,
        sold=True,
    )


def record_top_up(
    receipts: ReceiptBook,
    ctx: ToolCallContext,
    payer: PluginCore,
    plan_id: str,
    price: int,
    before: int,
    outcome: PaidOutcome,
) -> int | None:
    """The plan the call's token bought (automatic top-up at settle): a purchase of the
    payer's, listed by /svc_spend apart from the call (the balance rose by more than the
    call burned). The credits bought; ``None``: no top-up (or the receipt cannot say)."""
    try:
        after = int(str((outcome.receipt or {}).get("remainingBalance")))
    except ValueError:
        return None
    bought = after + price - before
    if bought <= 0:
        return None
    log.info("%s bought plan %s (automatic top-up: %s credits)", ctx.tool_name, plan_id, bought)
    receipts.add(
        what=f"plan bought by automatic top-up (for tool {ctx.tool_name})",
        payer=payer.session.address if payer.session else "",
        identity=who(ctx.caller),
        plan_id=plan_id,
        credits=bought,
        transaction=None,
        status="top-up",
        at=time.time(),
        call_id=ctx.call_id,
    )
    return bought


#: the key a JSON object result carries the notice under
NOTICE_KEY = "svcNotice"


def top_up_notice(tool: str, plan_id: str, price: int, bought: int, ticket: Ticket) -> str:
    """What a call that bought its plan tells the person, in money and credits: the plugin's
    own words and numbers (the plan's price from its record), never the service's text."""
    value = ticket.value
    if value is None:  # a ticket of the person's always has one; kept honest if not
        paid, used = "price unknown", "price unknown"
    else:
        paid = format_money(value.price_micro, value.currency)
        used = format_money(value.credits_micro(price), value.currency)
    within = (
        "the code you approved for it"
        if ticket.by_code
        else "your /svc_allow allowance"
        if ticket.by_person
        else "the gateway's spending limit"
    )
    return (
        f"Paid by you: {one_line(tool, 100)} bought plan {one_line(plan_id, 100)} first "
        f"(automatic top-up: {plural(bought, 'credit')} for {paid}, within {within}), then "
        f"used {plural(price, 'credit')} ({used}). /svc_spend lists both."
    )


def with_notice(result: Any, notice: str) -> Any:
    """The tool's result with ``notice`` beside it: a JSON object (or its text) gains
    :data:`NOTICE_KEY`, other text a last line, a list of parts (AstrBot's) a last text part;
    a result of another kind is left as it is (``/svc_spend`` still lists the purchase)."""
    if isinstance(result, dict):
        return {**result, NOTICE_KEY: notice}
    if isinstance(result, list):
        return [*result, f"[svc] {notice}"]
    if not isinstance(result, str):
        log.info("a top-up notice was not added to a %s result", type(result).__name__)
        return result
    try:
        parsed = json.loads(result)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return json.dumps({**parsed, NOTICE_KEY: notice}, ensure_ascii=False)
    return f"{result}\n\n[svc] {notice}" if result else f"[svc] {notice}"
