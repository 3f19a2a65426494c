"""``/svc_earnings``: what this gateway sold, read from each way in it sells through.

A sale is a settle of something this gateway sells: an answer of its paid endpoint, paid MCP
server or paid A2A agent (their flow's :class:`~svc_gateway.selling.flow.flow.PaidStats`:
counters and the latest receipts), a gated route's request (a payment middleware's stats, added
with :meth:`Sales.add`), or a metered tool call (the sold :class:`~.receipts.Receipt` s, with
their tool and payer). What the gateway *bought* (svc_queryAgent) is never a sale: it shows in
``/svc_spend`` only. With ``stateUrl`` a way in's counters are summed over every replica sharing
that state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..account.receipts import Receipt
from ..redact import get_logger
from ..safe_text import one_line, plural

log = get_logger("svc_gateway.earnings")


class SellerStats(Protocol):
    """The counters of a paid flow this module reads (``PaidStats`` has them)."""

    settled: int
    credits_settled: int
    settle_lost: int
    settle_queue: int

    @property
    def receipts(self) -> Iterable[Mapping[str, Any]]: ...


#: the counters of every replica on ``stateUrl``, summed; ``None`` without shared state
SharedTotals = Callable[[], Awaitable[Mapping[str, int] | None]]


@dataclass
class Seller:
    """One way in that sells: its name in ``/svc_earnings`` and where its counters are."""

    what: str
    stats: Callable[[], SellerStats]
    shared: SharedTotals | None = None


@dataclass
class _Row:
    sales: int = 0
    settled: int = 0
    queued: int = 0
    lost: int = 0
    note: str = ""
    #: queued and lost count sales, not credits (a flow's counters do not keep their credits)
    in_sales: bool = False


@dataclass
class Sales:
    """The ways in of this gateway that sell, besides its metered tools."""

    sellers: list[Seller] = field(default_factory=list)

    def add(
        self, what: str, stats: Callable[[], SellerStats], shared: SharedTotals | None = None
    ) -> None:
        """Count ``stats`` as sales; a flow already counted (the endpoint and the MCP server
        share one) is named once, under both names."""
        current = stats()
        for index, seller in enumerate(self.sellers):
            if seller.stats() is current:
                named = f"{seller.what} and {what}"
                self.sellers[index] = Seller(named, seller.stats, seller.shared)
                return
        self.sellers.append(Seller(what, stats, shared))


async def seller_row(seller: Seller) -> tuple[_Row, list[Mapping[str, Any]]]:
    """One way in's row and its latest receipts (the shared store down: this replica's own)."""
    stats = seller.stats()
    totals: Mapping[str, int] | None = None
    if seller.shared is not None:
        try:
            totals = await seller.shared()
        except Exception as exc:
            log.warning("could not read the shared sales counters (%s)", type(exc).__name__)
    settled, credits, lost = stats.settled, stats.credits_settled, stats.settle_lost
    note = ""
    if totals is not None:  # as last pushed (about once a second): never below our own
        settled = max(int(totals.get("settled", 0)), settled)
        credits = max(int(totals.get("credits_settled", 0)), credits)
        lost = max(int(totals.get("settle_lost", 0)), lost)
        note = " (all replicas on stateUrl; per payer: this replica's latest receipts)"
    queued = stats.settle_queue  # a gauge of the (shared) settle queue, never summed
    row = _Row(settled + queued + lost, credits, queued, lost, note, in_sales=True)
    return row, list(stats.receipts)


def _line(name: str, row: _Row) -> str:
    if row.in_sales:
        return (
            f"- {one_line(name, 80)}: {plural(row.sales, 'sale')}, {plural(row.settled, 'credit')} "
            f"settled, {row.queued} queued, {row.lost} lost (sales){row.note}"
        )
    return (
        f"- {one_line(name, 80)}: {plural(row.sales, 'sale')}, {row.settled} settled, "
        f"{row.queued} queued, {row.lost} lost"
    )


async def earnings_text(sales: Sales, sold: list[Receipt]) -> str:
    """Totals per way in (metered tools: per tool) and per payer: credits settled, queued and
    lost (a flow's queued and lost are counted in sales: their credits are not kept)."""
    ways: dict[str, _Row] = {}
    payers: dict[str, _Row] = {}
    for seller in sales.sellers:
        row, receipts = await seller_row(seller)
        ways[seller.what] = row
        for receipt in receipts:
            entry = payers.setdefault(str(receipt.get("payer") or "unknown"), _Row())
            entry.sales += 1
            with contextlib.suppress(ValueError):
                entry.settled += int(str(receipt.get("creditsRedeemed") or 0))
    for r in sold:
        for table, name in ((ways, r.what), (payers, r.payer or "unknown")):
            entry = table.setdefault(name, _Row())
            entry.sales += 1
            if r.status == "settled":
                entry.settled += r.credits
            elif r.status == "queued":
                entry.queued += r.credits
            else:
                entry.lost += r.credits
    count = sum(row.sales for row in ways.values())
    if not count:
        return "The gateway has sold nothing yet (sales since it started; purchases: /svc_spend)."
    settled = sum(row.settled for row in ways.values())
    queued = sum(row.queued for row in ways.values() if not row.in_sales)
    lost = sum(row.lost for row in ways.values() if not row.in_sales)
    head = (
        f"Earned {plural(settled, 'credit')} settled, {queued} queued (retried until the service "
        f"answers), {lost} lost, over {plural(count, 'sale')} since the gateway started "
        "(what it bought is in /svc_spend)."
    )
    flow_queued = sum(row.queued for row in ways.values() if row.in_sales)
    flow_lost = sum(row.lost for row in ways.values() if row.in_sales)
    if flow_queued or flow_lost:
        head += (
            f" Besides: {plural(flow_queued, 'sale')} of an endpoint queued for settling, "
            f"{plural(flow_lost, 'sale')} lost."
        )
    lines = [head, "Per way in:"]
    lines += [_line(name, row) for name, row in sorted(ways.items())]
    lines.append("Per payer:")
    lines += [_line(name, row) for name, row in sorted(payers.items())]
    return "\n".join(lines)
