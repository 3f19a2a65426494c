"""Receipts the plugin keeps: what each chat user paid (``/svc_spend``), and its metered sales.

Every metered tool call that ran and went to settling leaves one :class:`Receipt` (settled, queued
after an outage, or lost) marked ``sold``: the chat user paid it and the gateway sold it. An
agent's answer this gateway bought (svc_queryAgent) leaves one too, not ``sold``: a purchase, in
``/svc_spend`` only. ``/svc_earnings`` (:mod:`svc_gateway.chat.earnings`) reads the sold
ones beside the paid endpoint's and MCP server's own counters. Kept in memory (the latest
:data:`RECEIPTS_KEPT`): the service's balances stay the ledger's truth.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..approvals.money import PlanValue, format_money
from ..safe_text import one_line, plural

RECEIPTS_KEPT = 10_000
SHOWN = 20


@dataclass(frozen=True)
class Receipt:
    what: str
    payer: str
    identity: str | None
    plan_id: str
    credits: int
    transaction: str | None
    status: str  # settled | queued | lost | top-up (a plan bought)
    at: float
    call_id: str = ""
    request_id: str | None = None
    #: a sale of this gateway (a metered tool call), not only a purchase of its payer
    sold: bool = False

    @property
    def is_purchase(self) -> bool:
        """A plan bought (an automatic top-up), not a call paid with credits."""
        return self.status == "top-up"


class ReceiptBook:
    """The receipts of this gateway process; thread-safe."""

    def __init__(self, kept: int = RECEIPTS_KEPT) -> None:
        self._lock = threading.Lock()
        self._items: deque[Receipt] = deque(maxlen=kept)

    def add(self, **fields: object) -> None:
        receipt = Receipt(**fields)  # type: ignore[arg-type]
        with self._lock:
            self._items.append(receipt)

    def queued_ended(self, request_id: str, how: str, receipt: dict[str, object] | None) -> None:
        """A queued settle was retried: it is ``settled`` (with its transaction) or ``lost``."""
        with self._lock:
            for index, item in enumerate(self._items):
                if item.request_id == request_id and item.status == "queued":
                    tx = str((receipt or {}).get("transaction") or "") or item.transaction
                    self._items[index] = replace(item, status=how, transaction=tx)

    def all(self) -> list[Receipt]:
        with self._lock:
            return list(self._items)

    def sales(self) -> list[Receipt]:
        """What this gateway sold (metered tool calls), never what it bought."""
        return [r for r in self.all() if r.sold]

    def of(self, identity: str | None, address: str | None) -> list[Receipt]:
        """One payer's receipts: by chat identity, else by account address."""
        items = self.all()
        if identity is not None:
            return [r for r in items if r.identity == identity]
        wanted = (address or "").lower()
        return [r for r in items if r.identity is None and r.payer.lower() == wanted]


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _money(micro: int | None, currency: str) -> str:
    return "price unknown" if micro is None else format_money(micro, currency)


def _worth(receipt: Receipt, values: Mapping[str, PlanValue]) -> tuple[int | None, str]:
    """What a receipt cost in money, from its plan's price: a purchase the plan's price, a
    call its credits at the plan's price per credit (``None``: the plan could not be read)."""
    value = values.get(receipt.plan_id)
    if value is None:
        return None, ""
    if receipt.is_purchase:
        return value.price_micro, value.currency
    return value.credits_micro(receipt.credits), value.currency


def _total(items: list[tuple[Receipt, int | None, str]]) -> str:
    currencies = {currency for _r, _m, currency in items}
    if not items or any(money is None for _r, money, _c in items) or len(currencies) != 1:
        return "price unknown" if items else format_money(0, "USD")
    return format_money(sum(m or 0 for _r, m, _c in items), currencies.pop())


def spend_text(items: list[Receipt], values: Mapping[str, PlanValue] | None = None) -> str:
    """``/svc_spend``: what the user paid, purchases of plans apart from calls, each in money
    (from ``values``, the plans' prices) and in credits, newest first."""
    if not items:
        return "You have paid for nothing on this gateway yet (receipts since it started)."
    values = values or {}
    priced = [(r, *_worth(r, values)) for r in items]
    bought = [p for p in priced if p[0].is_purchase]
    calls = [p for p in priced if not p[0].is_purchase]
    parts = []
    if bought:
        credits = sum(r.credits for r, _m, _c in bought)
        parts.append(
            f"bought {plural(credits, 'credit')} for {_total(bought)} "
            f"({plural(len(bought), 'purchase')} of a plan)"
        )
    if calls:
        done = [p for p in calls if p[0].status == "settled"]
        settled = sum(r.credits for r, _m, _c in done)
        text = f"paid {plural(settled, 'credit')} ({_total(done)}) for {plural(len(calls), 'call')}"
        pending = [p for p in calls if p[0].status == "queued"]
        if pending:
            credits = sum(r.credits for r, _m, _c in pending)
            text += (
                f", and {plural(credits, 'credit')} ({_total(pending)}) more "
                f"{'is' if credits == 1 else 'are'} being settled"
            )
        parts.append(text)
    lines = ["You " + " and ".join(parts) + " (receipts since the gateway started):"]
    for title, group in (("Purchases:", bought), ("Calls:", calls)):
        if not group:
            continue
        lines.append(title)
        for r, money, currency in reversed(group[-SHOWN:]):
            tx = f", transaction {one_line(r.transaction, 80)}" if r.transaction else ""
            lines.append(
                f"- {_when(r.at)}: {one_line(r.what, 80)}, {plural(r.credits, 'credit')} "
                f"({_money(money, currency)}) on plan {one_line(r.plan_id, 80)} ({r.status}{tx})"
            )
    return "\n".join(lines)
