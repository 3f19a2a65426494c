"""``/svc_approve <code>``, ``/svc_deny <code>`` and ``/svc_allow ...``: the person's own word.

Only these commands approve: the host delivers them from the person, never from the model, so
a code in a tool argument, a prompt, a plan's name or an agent's answer approves nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..host import Caller, CommandContext, CommandSpec
from ..menu import ALLOW, APPROVE, DENY
from ..redact import get_logger
from ..service.errors import ServiceError, ServiceUnavailable
from .gate import Approvals, running_approved
from .ledger import MandateState
from .mandates import MandateSyntax, parse_allow, window_word
from .money import format_money
from .pending import Pending, Who

if TYPE_CHECKING:
    from ..runtime import PluginRuntime

log = get_logger("svc_gateway.approvals")

APPROVE_USAGE = (
    "Usage: /svc_approve <code> shows what the code buys; /svc_approve <code> <confirmation> "
    "buys it; /svc_approve alone lists what waits for you."
)
DENY_USAGE = "Usage: /svc_deny <code>, with the code of the purchase to drop."
MODEL_MODE = (
    "This gateway runs with approval: model (the assistant's confirm: true buys), so nothing "
    "waits for a code or a mandate here."
)


class CommandUsers(Protocol):
    """What the commands need from :class:`~svc_gateway.chat.commands.Commands`."""

    def chat_user(self, ctx: CommandContext) -> Caller | None: ...


def who_typed(users: CommandUsers, ctx: CommandContext) -> Who:
    """Whose money a command speaks for (a hosted chat user's, else the gateway's own) and
    which chat user typed it."""
    user = users.chat_user(ctx)
    caller = Caller(ctx.sender_id, ctx.channel or "").identity if ctx.sender_id else ""
    return Who(user.identity if user is not None else "", caller)


def _take(
    approvals: Approvals, users: CommandUsers, ctx: CommandContext, usage: str
) -> Pending | str:
    """The pending purchase whose code the person typed, dropped (once); else what to answer."""
    if not approvals.human:
        return MODEL_MODE
    code = ctx.args.strip()
    if not code or " " in code:
        return usage
    who = who_typed(users, ctx)
    return approvals.pending.take(code, who, authorized=ctx.is_authorized_sender, confirm=None)


def described(item: Pending) -> str:
    """What a code buys, in the plugin's words from the service's data (never the model's)."""
    pay_to = ", ".join(item.pay_to) or "the plan's owner"
    return (
        f"{item.summary}; amount: {format_money(item.amount_micro, item.currency)}; plan "
        f"{item.plan_id}, paid to {pay_to}"
    )


def _listing(approvals: Approvals, users: CommandUsers, ctx: CommandContext) -> str:
    who = who_typed(users, ctx)
    mine = [
        p
        for p in approvals.pending.of(who.account)
        if p.expires_at > approvals.clock() and (not p.who.caller or p.who.caller == who.caller)
    ]
    if not mine:
        return "Nothing waits for your approval."
    lines = ["Waiting for your approval (type /svc_approve <code> to see one and confirm it):"]
    lines += [f"- {p.code}: {described(p)}" for p in mine]
    return "\n".join(lines)


async def approve(approvals: Approvals, users: CommandUsers, ctx: CommandContext) -> str:
    """``/svc_approve`` lists; ``/svc_approve CODE`` shows what it buys, from the plugin, with
    a fresh confirmation word; ``/svc_approve CODE WORD`` buys it. The person sees what a code
    buys before money moves, whatever the model told them it was."""
    if not approvals.human:
        return MODEL_MODE
    words = ctx.args.split()
    if not words:
        return _listing(approvals, users, ctx)
    if len(words) > 2:
        return APPROVE_USAGE
    who, authorized = who_typed(users, ctx), ctx.is_authorized_sender
    if len(words) == 1:
        shown = approvals.pending.show(words[0], who, authorized=authorized)
        if isinstance(shown, str):
            return shown
        return (
            f"Code {shown.code} would {described(shown)}. Nothing is paid yet. To pay, type "
            f"/svc_approve {shown.code} {shown.confirm} ; to drop it, /svc_deny {shown.code}."
        )
    item = approvals.pending.take(words[0], who, authorized=authorized, confirm=words[1])
    if isinstance(item, str):
        return item
    if item.kind in ("tool", "token"):
        approvals.grant(item)
        again = "get the token" if item.kind == "token" else "run it"
        return f"Approved once: {item.summary}. Ask the assistant to {again} again."
    assert item.action is not None
    try:
        with running_approved(item):
            return await item.action()
    except ServiceError as exc:
        return f"Approved, but the payments service refused it ({exc.code}): {exc.message}"
    except Exception as exc:  # the person must always get an answer
        message = getattr(exc, "message", None)
        if isinstance(message, str):
            return f"Approved, but it did not go through: {message}"
        log.exception("an approved purchase failed")
        return f"Approved, but it failed ({type(exc).__name__}); see the gateway log."


async def deny(approvals: Approvals, users: CommandUsers, ctx: CommandContext) -> str:
    item = _take(approvals, users, ctx, DENY_USAGE)
    if isinstance(item, str):
        return item
    return f"Dropped {item.code}: {item.summary}. Nothing was bought."


def _state_line(state: MandateState) -> str:
    left = format_money(state.left_micro, state.mandate.currency)
    return (
        f"- {state.mandate.describe()}: {left} left {window_word(state.mandate.period)}"
        + state.explained()
    )


async def allow(approvals: Approvals, users: CommandUsers, ctx: CommandContext) -> str:
    """``/svc_allow``: set, list or end mandates; in words when they cannot be reached."""
    try:
        return await _allow(approvals, users, ctx)
    except ServiceUnavailable as exc:
        return (
            f"Spending limits are unavailable ({exc.message}); nothing was changed and nothing "
            "was paid. Purchases that need them are refused until they are back: try again in "
            "a minute."
        )


async def _allow(approvals: Approvals, users: CommandUsers, ctx: CommandContext) -> str:
    if not approvals.human:
        return MODEL_MODE
    who = who_typed(users, ctx)
    if who.account == "" and not ctx.is_authorized_sender:
        return "Only an authorised user of this gateway may let it spend."
    args = ctx.args.strip()
    if args.lower() == "off":
        ended = await approvals.ledger.clear(who.account)
        if not ended:
            return "You had no spending mandate; every payment asks for a code."
        return f"Ended {ended} spending mandate(s): every payment asks for a code again."
    if args:
        try:
            mandate = parse_allow(args, approvals.clock())
        except MandateSyntax as exc:
            return str(exc)
        await approvals.ledger.put(who.account, mandate)
        reply = (
            f"Allowed: paid queries and metered tools may spend {mandate.describe()} without "
            "a code; beyond it they ask. /svc_allow lists, /svc_allow off ends it."
        )
        return reply + _cap_note(approvals)
    listed = await approvals.mandates(who.account)
    if not listed:
        return "No spending mandate: every payment asks for a code. " + (
            "Set one with e.g. /svc_allow 5 USD per day."
        )
    lines = ["Your spending mandates:", *(_state_line(s) for s in listed)]
    cap = await approvals.cap_left(who.account)
    if cap is not None:
        lines.append(f"The gateway caps every user at {format_money(cap, 'USD')} more today.")
    return "\n".join(lines)


def _cap_note(approvals: Approvals) -> str:
    cap = approvals.cap_micro()
    if cap is None:
        return ""
    return f" This gateway caps every user at {format_money(cap, 'USD')} per day."


def approval_specs(
    approvals: Approvals, users: CommandUsers, runtime: PluginRuntime
) -> list[CommandSpec]:
    """The three commands, each run on the plugin loop."""

    async def approve_cmd(ctx: CommandContext) -> str:
        return await runtime.run(approve(approvals, users, ctx))

    async def deny_cmd(ctx: CommandContext) -> str:
        return await runtime.run(deny(approvals, users, ctx))

    async def allow_cmd(ctx: CommandContext) -> str:
        return await runtime.run(allow(approvals, users, ctx))

    return [APPROVE.spec(approve_cmd), DENY.spec(deny_cmd), ALLOW.spec(allow_cmd)]
