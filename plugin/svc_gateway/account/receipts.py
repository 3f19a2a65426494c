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
from dataclasses import dataclass, replace

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
    status: str  # settled | queued | lost
    at: float
    call_id: str = ""
    request_id: str | None = None
    #: a sale of this gateway (a metered tool call), not only a purchase of its payer
    sold: bool = False


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


def spend_text(items: list[Receipt]) -> str:
    """``/svc_spend``: what the user paid, newest first."""
    if not items:
        return "You have paid for nothing on this gateway yet (receipts since it started)."
    settled = sum(r.credits for r in items if r.status == "settled")
    pending = sum(r.credits for r in items if r.status == "queued")
    lines = [
        f"You paid {plural(settled, 'credit')} for {plural(len(items), 'call')}"
        + (
            f", and {plural(pending, 'credit')} more {'is' if pending == 1 else 'are'} "
            "being settled"
            if pending
            else ""
        )
        + " (receipts since the gateway started):"
    ]
    for r in reversed(items[-SHOWN:]):
        tx = f", transaction {one_line(r.transaction, 80)}" if r.transaction else ""
        lines.append(
            f"- {_when(r.at)}: {one_line(r.what, 80)}, {plural(r.credits, 'credit')} on plan "
            f"{one_line(r.plan_id, 80)} ({r.status}{tx})"
        )
    return "\n".join(lines)
