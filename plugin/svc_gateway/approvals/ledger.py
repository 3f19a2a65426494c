"""Where mandates and what they spent are kept: the protocol, and the in-process default.

Per account, one flat map (the Redis hash of :mod:`.redis_ledger` has the same fields):
``m:<id>`` a mandate (JSON), ``s:<id>:<window>`` micro-units spent in a window, ``h:<id>:<window>``
micro-units held by reservations still open, ``r:<rid>`` one reservation (JSON: amount, expiry,
the slots it holds). Reserving checks every slot and holds in all of them, or in none; a
reservation that outlives its expiry (its process died) counts as spent, never as freed.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Protocol

from .mandates import Mandate, window
from .money import format_money

#: a slot's mandate id for the operator's cap (``maxUserSpendPerDay``): never stored as a mandate
CAP_ID = "!cap"


@dataclass(frozen=True)
class Slot:
    """One limit a reservation must fit in: a mandate (or the cap) in its current window."""

    mandate_id: str
    window: str
    limit_micro: int
    must_exist: bool = True


@dataclass(frozen=True)
class Reserved:
    """The answer to a reservation: ``ok``, and the least left in any slot (after it, when
    ``ok``; before it, when refused, with the slot that refused)."""

    ok: bool
    left_micro: int
    refused_by: str = ""


@dataclass(frozen=True)
class MandateState:
    mandate: Mandate
    window: str
    spent_micro: int
    held_micro: int

    @property
    def left_micro(self) -> int:
        return max(self.mandate.amount_micro - self.spent_micro - self.held_micro, 0)

    def explained(self) -> str:
        """What the mandate's figures come from: spent (the purchases and calls /svc_spend
        lists at their prices) and held (payments in progress)."""
        currency = self.mandate.currency
        parts = []
        if self.spent_micro:
            parts.append(
                f"{format_money(self.spent_micro, currency)} spent: the purchases and calls "
                "/svc_spend lists, at their prices"
            )
        if self.held_micro:
            parts.append(f"{format_money(self.held_micro, currency)} held by payments in progress")
        return f" ({'; '.join(parts)})" if parts else ""


class MandateLedger(Protocol):
    """Mandates and their spending, per account (``channel:sender``, or ``""``)."""

    async def put(self, account: str, mandate: Mandate) -> None: ...

    async def clear(self, account: str) -> int: ...

    async def fields(self, account: str) -> dict[str, str]: ...

    async def reserve(
        self, account: str, rid: str, amount: int, slots: list[Slot], ttl: float, now: float
    ) -> Reserved: ...

    async def finish(self, account: str, rid: str, actual: int) -> None: ...

    async def aclose(self) -> None: ...


def states(fields: dict[str, str], now: float) -> list[MandateState]:
    """The mandates in ``fields``, oldest first, each with its current window's spending."""
    found: list[MandateState] = []
    for name, raw in fields.items():
        if not name.startswith("m:"):
            continue
        try:
            mandate = Mandate.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError):
            continue
        win = window(mandate.period, now)
        spent = int(fields.get(f"s:{mandate.id}:{win}", "0"))
        held = int(fields.get(f"h:{mandate.id}:{win}", "0"))
        found.append(MandateState(mandate, win, spent, held))
    return sorted(found, key=lambda s: s.mandate.created)


def spent_in(fields: dict[str, str], slot_id: str, win: str) -> int:
    """Spent plus held in one slot's window (the cap's, for the listing)."""
    return int(fields.get(f"s:{slot_id}:{win}", "0")) + int(fields.get(f"h:{slot_id}:{win}", "0"))


class LocalLedger:
    """The in-process ledger (no ``stateUrl``): one lock, the same rules as the Redis script."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, str]] = {}

    async def put(self, account: str, mandate: Mandate) -> None:
        with self._lock:
            self._data.setdefault(account, {})[f"m:{mandate.id}"] = json.dumps(mandate.to_json())

    async def clear(self, account: str) -> int:
        with self._lock:
            data = self._data.setdefault(account, {})
            ended = [name for name in data if name.startswith("m:")]
            for name in ended:
                del data[name]
            return len(ended)

    async def fields(self, account: str) -> dict[str, str]:
        with self._lock:
            return dict(self._data.get(account, {}))

    async def reserve(
        self, account: str, rid: str, amount: int, slots: list[Slot], ttl: float, now: float
    ) -> Reserved:
        with self._lock:
            data = self._data.setdefault(account, {})
            for name in [n for n in data if n.startswith("r:")]:
                held = json.loads(data[name])
                if held["exp"] <= now:
                    self._unhold(data, name[2:], int(held["amount"]))
            best: int | None = None
            for slot in slots:
                if slot.must_exist and f"m:{slot.mandate_id}" not in data:
                    return Reserved(False, 0, slot.mandate_id)
                left = slot.limit_micro - spent_in(data, slot.mandate_id, slot.window)
                if amount > left:
                    return Reserved(False, left, slot.mandate_id)
                best = left - amount if best is None else min(best, left - amount)
            for slot in slots:
                name = f"h:{slot.mandate_id}:{slot.window}"
                data[name] = str(int(data.get(name, "0")) + amount)
            held_slots = [[s.mandate_id, s.window] for s in slots]
            data[f"r:{rid}"] = json.dumps({"amount": amount, "exp": now + ttl, "slots": held_slots})
            return Reserved(True, best or 0)

    async def finish(self, account: str, rid: str, actual: int) -> None:
        with self._lock:
            self._unhold(self._data.setdefault(account, {}), rid, actual)

    @staticmethod
    def _unhold(data: dict[str, str], rid: str, actual: int) -> None:
        raw = data.pop(f"r:{rid}", None)
        if raw is None:
            return
        held = json.loads(raw)
        for mandate_id, win in held["slots"]:
            suffix = f"{mandate_id}:{win}"
            data[f"h:{suffix}"] = str(int(data.get(f"h:{suffix}", "0")) - int(held["amount"]))
            if actual > 0:
                data[f"s:{suffix}"] = str(int(data.get(f"s:{suffix}", "0")) + actual)

    async def aclose(self) -> None:
        return None
