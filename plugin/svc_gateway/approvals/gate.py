"""The one spending gate: every way money can leave a person's wallet asks it for a ticket.

A token (for a query, a metered call or the model's own ``svc_getAccessToken``), the delegation
behind it, an order (crypto or card) and the top-up a delegation may pay: each is allowed by a
:class:`Ticket` this gate hands out, and goes out only through :mod:`.spend` with it. In
``"model"`` mode a ticket carries the configured delegation (``confirm: true`` buys). In
``"human"`` mode a ticket comes from the person: their code for that purchase, or a reservation
in their mandates of the most the token behind it could ever spend (its credits at the plan's
price, plus the plan's price when a top-up is possible), settled with what it did spend or
released when nothing went out. Such a ticket's token stands on a delegation of its own that can
back one settle and pay at most the top-up reserved, so no token outspends its ticket.
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
from ..service.errors import PaymentRequired, ServiceError, ServiceUnavailable
from .ledger import CAP_ID, MandateLedger, MandateState, Slot, states
from .mandates import window
from .money import PlanValue, cents_ceiling, format_money, per_request_credits, plan_value, to_micro
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
#: a purchase the person approved with a code, being run now
APPROVED: ContextVar[Pending | None] = ContextVar("svc_approved", default=None)
#: a delegation that cannot pay for any top-up
NO_TOP_UP_CENTS = 1
#: a reservation not finished within this many seconds (its process died) counts as spent
RESERVATION_TTL_SECS = 3600.0
#: the settles a ticket's own delegation backs (``"human"`` mode): the one purchase approved
ONE_SETTLE = 1
#: the currencies a delegation's budget (cents) can buy a plan in (USDC and EURC count as these)
BUDGET_CURRENCIES = frozenset({"USD", "EUR"})


class ApprovalNeeded(Exception):
    """Nothing was paid: ``result`` is the pending purchase the model is shown."""

    def __init__(self, result: dict[str, Any], pending: Pending) -> None:
        super().__init__("approval needed")
        self.result = result
        self.pending = pending


class NotApproved(Exception):
    """A purchase reached the gate's way out without the ticket that allows it (a bug)."""


def ledger_unavailable(exc: ServiceError) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"Spending limits are unavailable ({exc.message}); nothing was paid",
        code="approvals_unavailable",
        hint="Try again in a minute; purchases that need the person's mandates wait until "
        "they can be checked.",
    )


@dataclass
class Ticket:
    """One purchase allowed to go ahead. ``limit_cents`` bounds its token's delegation;
    ``max_transactions`` is the settles that delegation backs (``None``: the gateway's pooled
    delegation, ``"model"`` mode); ``amount_micro`` is what it holds in the person's mandates
    (``rid`` set) or what the person approved, ``top_up_micro`` the part of it that buys the
    plan again."""

    gate: Approvals | None
    who: Who
    kind: str
    plan_id: str
    limit_cents: int
    duration_secs: int
    max_transactions: int | None = None
    value: PlanValue | None = None
    amount_micro: int = 0
    top_up_micro: int = 0
    rid: str = ""
    done: bool = False

    @property
    def by_person(self) -> bool:
        """Allowed by the person (a code or a mandate), not by ``"model"`` mode."""
        return self.max_transactions is not None

    @property
    def by_code(self) -> bool:
        """Allowed by the code the person approved for this one purchase (no mandate)."""
        return self.by_person and not self.rid

    def spent_micro(self, credits: int | None, topped_up: bool | None) -> int:
        """What the purchase cost in money: ``credits`` at the plan's price plus the top-up
        when one happened; the whole reservation when either is not known."""
        if credits is None or self.value is None:
            return self.amount_micro
        top_up = self.top_up_micro if topped_up is not False else 0
        return min(self.value.credits_micro(credits) + top_up, self.amount_micro)

    async def settle(self, credits: int | None, *, topped_up: bool | None = None) -> None:
        """What it cost: ``credits`` redeemed (``None``: not known) and whether a top-up
        happened (``None``: not known, counted); the rest of the reservation is freed."""
        if self.done:
            return
        self.done = True
        if self.gate is None or not self.rid:
            return
        spent = self.spent_micro(credits, topped_up)
        await self.gate.ledger.finish(self.who.account, self.rid, spent)
        await self.gate.mandates(self.who.account)  # what is left, for the balance context

    async def release(self) -> None:
        """Nothing was paid (the token never went out)."""
        if not self.done and self.rid and self.gate is not None:
            await self.gate.ledger.finish(self.who.account, self.rid, 0)
        self.done = True


def model_ticket(config: PluginConfig, kind: str, plan_id: str, who: Who | None = None) -> Ticket:
    """A ``"model"``-mode ticket: the gateway's configured delegation, nothing reserved."""
    return Ticket(
        None,
        who or Who(""),
        kind,
        plan_id,
        config.default_spending_limit_cents,
        config.default_delegation_duration_secs,
    )


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
        #: metered calls and tokens approved once: key -> the pending purchase that approved it
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
                f"{s.explained()}"
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

    # -- tickets -----------------------------------------------------------------------------

    async def ticket(
        self,
        core: Account,
        plan: Plan,
        agent_id: str | None,
        credits: int | None = None,
        *,
        kind: str,
        ask: Callable[[PlanValue, int, bool], Awaitable[ApprovalNeeded]],
        caller: str | None = None,
    ) -> Ticket:
        """A ticket to spend ``credits`` (the plan's most per request by default) of ``plan``
        on ``agent_id``'s behalf: the configured delegation in ``"model"`` mode; else within
        the code the person approved for it, or a reservation in their mandates; else
        :class:`ApprovalNeeded` raised with what ``ask(value, amount, top_up)`` makes of it."""
        who = self.who(core, caller)
        if not self.human:
            return model_ticket(self.config, kind, plan.id, who)
        value = plan_value(plan)
        duration = self.config.default_delegation_duration_secs
        approved = APPROVED.get()
        if approved is not None and approved.plan_id == plan.id and approved.kind == kind:
            return self.approved_ticket(approved, value, who)
        credits = credits if credits is not None else per_request_credits(plan)
        held = await read_credits(core, plan.id)
        short = held is None or (held <= 0 if value.is_time else held < credits)
        if (
            short
            and held is not None
            and value.price_micro
            and value.currency not in BUDGET_CURRENCIES
        ):  # no code may offer a purchase the token's budget could never make
            raise PaymentRequired(
                f"You hold {held} credits of this plan and it is priced in {value.currency}, "
                "which a token's spending budget cannot pay: nothing was paid",
                code="insufficient_credits",
                hint="Order the plan first with svc_orderPlan (you approve that order), then "
                "try again.",
            )
        top_up = cents_ceiling(value.price_micro) * 10_000 if short else 0
        amount = value.credits_micro(credits) + top_up
        rid = secrets.token_hex(8)
        try:
            slots = await self._slots(who, agent_id, plan.id, value.currency)
            reserved = (
                await self.ledger.reserve(
                    who.account, rid, amount, slots, RESERVATION_TTL_SECS, self.clock()
                )
                if slots
                else None
            )
        except ServiceUnavailable as exc:  # the mandates cannot be read: nothing is allowed
            raise ledger_unavailable(exc) from None
        if reserved is None:
            raise await ask(value, amount, short)
        if not reserved.ok:
            log.info("a payment beyond the mandate asks the person (%s)", reserved.refused_by)
            raise await ask(value, amount, short)
        limit = top_up // 10_000 if short else NO_TOP_UP_CENTS
        return Ticket(
            self, who, kind, plan.id, max(limit, NO_TOP_UP_CENTS), duration, ONE_SETTLE, value,
            amount, top_up, rid,
        )  # fmt: skip

    def approved_ticket(self, approved: Pending, value: PlanValue, who: Who) -> Ticket:
        """The ticket of a purchase the person approved with a code: its delegation can pay
        the top-up the code named (when it named one), nothing more, for one settle."""
        top_up = cents_ceiling(value.price_micro) if approved.top_up else NO_TOP_UP_CENTS
        return Ticket(
            self,
            who,
            approved.kind,
            approved.plan_id,
            max(top_up, NO_TOP_UP_CENTS),
            self.config.default_delegation_duration_secs,
            ONE_SETTLE,
            value,
            approved.amount_micro,
            value.price_micro if approved.top_up else 0,
        )

    def order_ticket(self, core: Account, plan_id: str, kind: str) -> Ticket:
        """An order of ``plan_id`` (``order`` or ``card_order``): in ``"human"`` mode only while
        the person's code for exactly that order runs; :class:`NotApproved` otherwise."""
        who = self.who(core)
        if not self.human:
            return model_ticket(self.config, kind, plan_id, who)
        approved = APPROVED.get()
        if approved is None or approved.plan_id != plan_id or approved.kind != kind:
            raise NotApproved(f"an order of plan {plan_id} without the person's code")
        return Ticket(self, who, kind, plan_id, NO_TOP_UP_CENTS, 0, ONE_SETTLE)

    def grant(self, pending: Pending) -> None:
        """A metered call or a token the person approved: the same call goes through once."""
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
        top_up: bool = False,
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
            top_up=top_up,
            pay_to=tuple(sorted(set(plan.registry.price.receivers))),
        )


@contextlib.contextmanager
def running_approved(pending: Pending) -> Iterator[None]:
    token = APPROVED.set(pending)
    try:
        yield
    finally:
        APPROVED.reset(token)


async def read_credits(core: Account, plan_id: str) -> int | None:
    try:
        return (await core.client().get_plan_balance(plan_id)).balance
    except ServiceError:
        return None
