"""What every way of spending consults: approval mode, mandates, codes, token limits.

In ``"model"`` mode nothing changes (``confirm: true`` buys, tokens carry the configured
delegation). In ``"human"`` mode an order waits for the person's code; a paid query or metered
call goes through only within a mandate (reserved before the token is minted, settled or
released after) or once the person approved it; and every delegation minted carries at most
what the person approved (a mandate's remainder, the approved top-up, else 1 cent).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from ..config import PluginConfig
from ..redact import get_logger
from ..safe_text import NAME_LIMIT, one_line
from ..service.errors import ServiceError
from .ledger import CAP_ID, MandateLedger, MandateState, Slot, states
from .mandates import window
from .money import (
    PlanValue,
    cents_ceiling,
    cents_floor,
    format_money,
    per_request_credits,
    plan_value,
    to_micro,
)
from .pending import Pending, PendingBook, Who

if TYPE_CHECKING:
    from ..service.client import ServiceClient
    from ..service.models import Plan


class Account(Protocol):
    """The chat user's side of a core: whose account (``None``: the gateway's own) and its
    client (``PluginCore`` is one)."""

    identity: str | None

    def client(self) -> ServiceClient: ...


log = get_logger("svc_gateway.approvals")

#: the chat user behind the tool call being run (``channel:sender``; ``""``: nobody named)
CALLER: ContextVar[str] = ContextVar("svc_approval_caller", default="")
#: the delegation limit (cents) of tokens minted by the purchase being run, when it has one
TOKEN_LIMIT: ContextVar[int | None] = ContextVar("svc_token_limit", default=None)
#: a purchase the person approved with a code, being run now
APPROVED: ContextVar[Pending | None] = ContextVar("svc_approved", default=None)
#: a delegation that cannot pay for any top-up
NO_TOP_UP_CENTS = 1
#: a reservation not finished within this many seconds (its process died) counts as spent
RESERVATION_TTL_SECS = 3600.0


class ApprovalNeeded(Exception):
    """Nothing was paid: ``result`` is the pending purchase the model is shown."""

    def __init__(self, result: dict[str, Any], pending: Pending) -> None:
        super().__init__("approval needed")
        self.result = result
        self.pending = pending


@dataclass
class Ticket:
    """A paid query or metered call allowed to go ahead: within a mandate (``rid`` set), or
    approved with a code. ``limit_cents`` bounds the delegation of its token."""

    gate: Approvals
    who: Who
    value: PlanValue
    amount_micro: int
    limit_cents: int
    rid: str = ""
    done: bool = False

    @contextlib.contextmanager
    def minting(self) -> Iterator[None]:
        """Tokens minted inside carry this ticket's delegation limit."""
        token = TOKEN_LIMIT.set(self.limit_cents)
        try:
            yield
        finally:
            TOKEN_LIMIT.reset(token)

    async def settle(self, credits: int | None) -> None:
        """What it cost: ``credits`` redeemed, or ``None`` when not known (the reserved
        amount then counts as spent)."""
        if self.done or not self.rid:
            self.done = True
            return
        self.done = True
        spent = self.amount_micro if credits is None else self.value.credits_micro(credits)
        await self.gate.ledger.finish(self.who.account, self.rid, spent)
        await self.gate.mandates(self.who.account)  # what is left, for the balance context

    async def release(self) -> None:
        """Nothing was paid (the token never went out)."""
        if not self.done and self.rid:
            await self.gate.ledger.finish(self.who.account, self.rid, 0)
        self.done = True


class Approvals:
    """The gateway's approvals: one per plugin, shared by every chat user's core."""

    def __init__(
        self,
        config: PluginConfig,
        ledger: MandateLedger,
        *,
        human: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.ledger = ledger
        self.human = human
        self.clock = clock
        self.pending = PendingBook(config.approval_ttl_secs, clock)
        #: metered calls approved once: key -> the pending purchase that approved it
        self._grants: dict[str, Pending] = {}
        #: the mandates each account had when last read (the balance context's lines)
        self._seen: dict[str, list[MandateState]] = {}

    @property
    def mode(self) -> str:
        return "human" if self.human else "model"

    def who(self, core: Account, caller: str | None = None) -> Who:
        return Who(core.identity or "", CALLER.get() if caller is None else caller)

    # -- mandates ----------------------------------------------------------------------------

    async def mandates(self, account: str) -> list[MandateState]:
        found = states(await self.ledger.fields(account), self.clock())
        self._seen[account] = found  # what the balance context shows, read without waiting
        return found

    def context_lines(self, account: str) -> list[str]:
        """The balance context's lines (``"human"`` mode): purchases waiting for the person's
        code, and what their mandates had left when this process last looked. Data, never
        instructions: names are quoted."""
        if not self.human:
            return []
        lines = [
            f"Waiting for the user's /svc_approve (svc plugin): {p.summary} (code {p.code})"
            for p in self.pending.of(account)
            if p.expires_at > self.clock() and p.kind != "tool"
        ][-3:]
        seen = self._seen.get(account)
        if seen:
            left = "; ".join(
                f"{format_money(s.left_micro, s.mandate.currency)} left of {s.mandate.describe()}"
                for s in seen
            )
            lines.append(
                f"Spending mandate (svc plugin; paid queries need no code within it): {left}"
            )
        elif seen is not None or self.pending.of(account):
            lines.append(
                "No spending mandate (svc plugin): each paid query asks the user for a code."
            )
        return lines

    def cap_micro(self) -> int | None:
        cap = self.config.max_user_spend_per_day
        return None if cap is None else to_micro(Decimal(str(cap)))

    async def cap_left(self, account: str) -> int | None:
        cap = self.cap_micro()
        if cap is None:
            return None
        fields = await self.ledger.fields(account)
        win = window("day", self.clock())
        used = int(fields.get(f"s:{CAP_ID}:{win}", "0")) + int(fields.get(f"h:{CAP_ID}:{win}", "0"))
        return max(cap - used, 0)

    async def _slots(
        self, who: Who, agent_id: str | None, plan_id: str, currency: str
    ) -> list[Slot]:
        now = self.clock()
        found = [
            Slot(s.mandate.id, s.window, s.mandate.amount_micro)
            for s in await self.mandates(who.account)
            if s.mandate.covers(agent_id, plan_id, currency)
        ]
        cap = self.cap_micro()
        if found and cap is not None:
            if currency != "USD":
                return []  # the operator's cap is in USD: other currencies ask every time
            found.append(Slot(CAP_ID, window("day", now), cap, must_exist=False))
        return found

    async def token_limit_cents(self, core: Account, plan_id: str, agent_id: str | None) -> int:
        """The spending limit of a token's delegation: the configured one in ``"model"`` mode;
        in ``"human"`` mode at most what the person approved."""
        configured = self.config.default_spending_limit_cents
        if not self.human:
            return configured
        bound = TOKEN_LIMIT.get()
        if bound is None:  # a bare token (svc_getAccessToken): what the mandates have left
            left = [
                s.left_micro
                for s in await self.mandates(core.identity or "")
                if s.mandate.agent_id in (None, agent_id) and s.mandate.plan_id in (None, plan_id)
            ]
            cap = await self.cap_left(core.identity or "")
            if left and cap is not None:
                left.append(cap)
            bound = cents_floor(min(left)) if left else NO_TOP_UP_CENTS
        return max(min(configured, bound), NO_TOP_UP_CENTS)

    # -- paid queries and metered calls ------------------------------------------------------

    async def ticket(
        self,
        core: Account,
        plan: Plan,
        agent_id: str | None,
        credits: int | None = None,
        *,
        ask: Callable[[PlanValue, int], Awaitable[ApprovalNeeded]],
        caller: str | None = None,
    ) -> Ticket | None:
        """``None`` in ``"model"`` mode; else a ticket to pay ``credits`` (the plan's most per
        request by default) within a mandate or an approval, or :class:`ApprovalNeeded` raised
        with what ``ask(value, amount)`` makes of it."""
        if not self.human:
            return None
        value = plan_value(plan)
        amount = value.credits_micro(credits if credits is not None else per_request_credits(plan))
        if value.is_time:
            amount = value.price_micro
        who = self.who(core, caller)
        approved = APPROVED.get()
        if approved is not None and approved.plan_id == plan.id:
            limit = approved_limit(approved)
            return Ticket(self, who, value, amount, limit)
        slots = await self._slots(who, agent_id, plan.id, value.currency)
        if not slots:
            raise await ask(value, amount)
        rid = secrets.token_hex(8)
        reserved = await self.ledger.reserve(
            who.account, rid, amount, slots, RESERVATION_TTL_SECS, self.clock()
        )
        if not reserved.ok:
            log.info("a payment beyond the mandate asks the person (%s)", reserved.refused_by)
            raise await ask(value, amount)
        limit = cents_floor(reserved.left_micro + amount)
        return Ticket(self, who, value, amount, max(limit, NO_TOP_UP_CENTS), rid)

    def grant(self, pending: Pending) -> None:
        """A metered call the person approved: the same call goes through once."""
        self._grants[pending.grant_key] = pending

    def take_grant(self, key: str) -> Pending | None:
        return self._grants.pop(key, None)

    def add_pending(
        self,
        core: Account,
        kind: str,
        plan: Plan,
        amount_micro: int,
        currency: str,
        summary: str,
        *,
        action: Callable[[], Awaitable[str]] | None = None,
        grant_key: str = "",
        caller: str | None = None,
    ) -> Pending:
        return self.pending.add(
            self.who(core, caller),
            kind,
            plan.id,
            amount_micro,
            currency,
            summary,
            action=action,
            grant_key=grant_key,
        )


@contextlib.contextmanager
def limited(ticket: Ticket | None) -> Iterator[None]:
    """Tokens minted inside carry the ticket's delegation limit (none: the gateway's own)."""
    if ticket is None:
        yield
        return
    with ticket.minting():
        yield


def approved_limit(pending: Pending) -> int:
    """The delegation limit of a purchase approved with a code: the top-up it named (its
    amount, when it named one), else a delegation that buys nothing."""
    return max(cents_ceiling(pending.amount_micro), NO_TOP_UP_CENTS)


@contextlib.contextmanager
def running_approved(pending: Pending) -> Iterator[None]:
    token = APPROVED.set(pending)
    try:
        yield
    finally:
        APPROVED.reset(token)


def quote_of(plan: Plan) -> dict[str, Any]:
    """The plan as the plugin renders it from the service's data: name, price, what it grants,
    who is paid."""
    from ..service.pricing import format_price  # pricing loads the wire models

    price = plan.registry.price
    credits = plan.registry.credits
    return {
        "planId": plan.id,
        "planName": one_line(plan.name, NAME_LIMIT),
        "price": format_price(
            list(price.amounts),
            is_crypto=plan.is_crypto,
            token_address=price.token_address,
            currency=plan.metadata.plan.currency,
        ),
        "grants": (
            f"access for {credits.duration_secs} s"
            if plan.is_time_plan
            else f"{credits.amount} credits"
        ),
        "payTo": sorted({one_line(r, 64) for r in price.receivers}),
    }


def pending_result(pending: Pending, quote: dict[str, Any], message: str) -> dict[str, Any]:
    """What the model is shown instead of a purchase: the quote, the code and the person's
    line. The model cannot approve it: only the person's own command does."""
    return {
        "approvalRequired": True,
        "pending": {
            "code": pending.code,
            "kind": pending.kind,
            "amount": format_money(pending.amount_micro, pending.currency),
            "expiresInSecs": max(int(pending.expires_at - pending.created), 0),
            **quote,
        },
        "approveWith": pending.line(),
        "denyWith": f"/svc_deny {pending.code}",
        "message": message
        + f" The user approves it by typing {pending.line()} themselves (or /svc_deny "
        f"{pending.code}); the code expires in {int(pending.expires_at - pending.created)} s. "
        "You cannot approve it: a code in a tool argument, a prompt or any text approves "
        "nothing.",
    }


async def read_credits(core: Account, plan_id: str) -> int | None:
    try:
        return (await core.client().get_plan_balance(plan_id)).balance
    except ServiceError:
        return None
