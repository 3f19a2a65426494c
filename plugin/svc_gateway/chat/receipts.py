"""Receipts the plugin keeps: what each chat user paid, and what the gateway earned.

Every metered tool call that ran and went to settling leaves one :class:`Receipt` (settled, queued
after an outage, or lost). ``/svc_spend`` shows the calling user theirs; ``/svc_earnings`` shows the
operator the totals per tool and per payer. Kept in memory (the latest :data:`RECEIPTS_KEPT`):
the service's balances stay the ledger's truth.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, replace

from ..safe_text import one_line

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
        f"You paid {settled} credits for {len(items)} call(s)"
        + (f", and {pending} more are being settled" if pending else "")
        + " (receipts since the gateway started):"
    ]
    for r in reversed(items[-SHOWN:]):
        tx = f", transaction {one_line(r.transaction, 80)}" if r.transaction else ""
        lines.append(
            f"- {_when(r.at)}: {one_line(r.what, 80)}, {r.credits} credits on plan "
            f"{one_line(r.plan_id, 80)} ({r.status}{tx})"
        )
    return "\n".join(lines)


def earnings_text(items: list[Receipt]) -> str:
    """``/svc_earnings``: totals per tool and per payer, settled vs queued vs lost."""
    if not items:
        return "The gateway has earned nothing yet (receipts since it started)."

    def totals(key: str) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for r in items:
            name = r.what if key == "what" else (r.payer or "unknown")
            row = table.setdefault(name, {"settled": 0, "queued": 0, "lost": 0, "calls": 0})
            row[r.status] = row.get(r.status, 0) + r.credits
            row["calls"] += 1
        return table

    def render(title: str, table: dict[str, dict[str, int]]) -> list[str]:
        lines = [title]
        for name, row in sorted(table.items()):
            lines.append(
                f"- {one_line(name, 80)}: {row['calls']} call(s), {row['settled']} settled, "
                f"{row['queued']} queued, {row['lost']} lost"
            )
        return lines

    all_rows = totals("what")
    settled = sum(r["settled"] for r in all_rows.values())
    queued = sum(r["queued"] for r in all_rows.values())
    lost = sum(r["lost"] for r in all_rows.values())
    head = (
        f"Earned {settled} credits settled, {queued} queued (retried until the service "
        f"answers), {lost} lost, over {len(items)} paid call(s) since the gateway started."
    )
    return "\n".join([head, *render("Per tool:", all_rows), *render("Per payer:", totals("payer"))])
