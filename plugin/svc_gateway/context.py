"""Balance context: one short line per plan, injected before each prompt.

Balances come from a 60 s ``TTLCache``. Concurrent misses for one plan share a single fetch;
login, logout and the plugin's own spending invalidate entries. The hook never waits longer
than a small budget: on a slow service it serves the last known value (or nothing) and lets
the fetch finish in the background.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import TTLCache

from .config import PlanRef
from .core import PluginCore
from .errors import ServiceError
from .models import PlanBalance
from .redact import get_logger

log = get_logger("svc_gateway.context")

BALANCE_TTL_SECS = 60.0
DEFAULT_BUDGET_SECS = 1.5


@dataclass(frozen=True)
class BalanceEntry:
    plan_id: str
    name: str
    balance: int
    is_subscriber: bool


class BalanceCache:
    """Balances per plan with a TTL, single-flight misses and stale fallback."""

    def __init__(
        self,
        core: PluginCore,
        *,
        ttl: float = BALANCE_TTL_SECS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self._fresh: TTLCache[str, BalanceEntry] = TTLCache(maxsize=256, ttl=ttl, timer=clock)
        self._stale: dict[str, BalanceEntry] = {}
        self._inflight: dict[str, asyncio.Task[BalanceEntry | None]] = {}
        self._generation = 0
        self.fetches = 0

    def invalidate(self, plan_id: str | None = None) -> None:
        """Drop one plan's entry, or everything (login/logout) when ``plan_id`` is None."""
        if plan_id is None:
            self._generation += 1
            self._fresh.clear()
            self._stale.clear()
            for task in self._inflight.values():
                task.cancel()
            self._inflight.clear()
            return
        self._fresh.pop(plan_id, None)

    async def get(self, ref: PlanRef) -> BalanceEntry | None:
        """The balance, fetched at most once per TTL however many callers ask."""
        cached = self._fresh.get(ref.plan_id)
        if cached is not None:
            return cached
        task = self._inflight.get(ref.plan_id)
        if task is None:
            task = asyncio.ensure_future(self._fetch(ref, self._generation))
            self._inflight[ref.plan_id] = task
            task.add_done_callback(functools.partial(self._done, ref.plan_id))
        return await asyncio.shield(task)

    def _done(self, plan_id: str, task: asyncio.Task[BalanceEntry | None]) -> None:
        if self._inflight.get(plan_id) is task:
            del self._inflight[plan_id]

    def stale(self, plan_id: str) -> BalanceEntry | None:
        return self._stale.get(plan_id)

    async def _fetch(self, ref: PlanRef, generation: int) -> BalanceEntry | None:
        self.fetches += 1
        try:
            balance: PlanBalance = await self._core.client().get_plan_balance(ref.plan_id)
        except ServiceError as exc:
            log.info("balance of plan %s unavailable: %s", ref.plan_id, exc.code)
            return None
        entry = BalanceEntry(
            plan_id=ref.plan_id,
            name=ref.name or balance.plan_name or ref.plan_id,
            balance=balance.balance,
            is_subscriber=balance.is_subscriber,
        )
        if generation == self._generation:  # a logout during the fetch discards it
            self._fresh[ref.plan_id] = entry
            self._stale[ref.plan_id] = entry
        return entry


def format_line(entry: BalanceEntry) -> str:
    status = "subscribed" if entry.is_subscriber else "not subscribed"
    return f"- {entry.name} (plan {entry.plan_id}): {entry.balance} credits, {status}"


class BalanceContext:
    """The ``before_prompt_build`` hook's logic."""

    def __init__(self, core: PluginCore, cache: BalanceCache, budget: float = DEFAULT_BUDGET_SECS):
        self._core = core
        self.cache = cache
        self.budget = budget

    def plans(self) -> list[PlanRef]:
        refs = self._core.config.plan_refs()
        default = self._core.plan_id
        if default and all(r.plan_id != default for r in refs):
            refs.append(PlanRef(plan_id=default, payment_type=self._core.config.payment_type))
        return refs

    async def text(self) -> str | None:
        """The context text, or None when logged out or nothing is known. Never raises."""
        try:
            return await self._text()
        except Exception:  # the hook must never break a prompt
            log.exception("balance context failed")
            return None

    async def _text(self) -> str | None:
        if self._core.session is None:
            return None
        refs = self.plans()
        if not refs:
            return None
        tasks = {ref.plan_id: asyncio.ensure_future(self.cache.get(ref)) for ref in refs}
        done, _pending = await asyncio.wait(tasks.values(), timeout=self.budget)
        lines = []
        for ref in refs:
            task = tasks[ref.plan_id]
            entry = task.result() if task in done and not task.cancelled() else None
            entry = entry or self.cache.stale(ref.plan_id)
            if entry is not None:
                lines.append(format_line(entry))
        if not lines:
            return None
        return "Payments service balance (svc plugin):\n" + "\n".join(lines)
