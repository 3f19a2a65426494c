"""Balance context: one short line per plan, injected before each prompt.

Balances live for 60 s in a cache. Concurrent misses for one plan share a single fetch; login,
logout and the plugin's own spending invalidate entries, and any fresh balance read (the
``svc_checkBalance`` tool) replaces the cached value.

A prompt that finds everything fresh is answered by :meth:`BalanceContext.peek` from the
caller's own thread under a lock, without crossing to the plugin loop. Only a miss or an expired
entry goes to the loop, and never for longer than a small budget: on a slow service the hook
serves the last known value (or nothing) and lets the fetch finish in the background.
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ..account.core import PluginCore
from ..config import PlanRef
from ..redact import get_logger
from ..safe_text import NAME_LIMIT, one_line, plural, quoted
from ..service.errors import ServiceError

if TYPE_CHECKING:
    from ..service.models import PlanBalance

log = get_logger("svc_gateway.context")

BALANCE_TTL_SECS = 60.0
#: Plans used this session that the context lists besides the configured ones.
MAX_USED_PLANS = 5
LOGGED_OUT_NOTICE = (
    "Payments service (svc plugin): not logged in. The user can log in by sending /svc_login "
    "(a browser login) or /svc_login env:SVC_API_KEY; the svc_* tools need it."
)
#: A hosted gateway's chat user with no account (``perUserAccounts``).
NO_ACCOUNT_NOTICE = (
    "Payments service (svc plugin): this user has no payments account on this gateway yet. "
    "With their consent they send /svc_login new (the gateway's operator opens one for them), "
    "or /svc_login <env>:<API_KEY> to link their own."
)
DEFAULT_BUDGET_SECS = 1.5


class _Miss:
    """The marker :meth:`BalanceContext.peek` returns when the loop must be asked."""

    def __repr__(self) -> str:
        return "MISS"


MISS: Final = _Miss()


@dataclass(frozen=True)
class BalanceEntry:
    plan_id: str
    name: str
    balance: int
    is_subscriber: bool
    #: A time plan grants access for a period instead of credits to spend.
    is_time: bool = False
    #: How long one purchase of a time plan gives access, when known.
    duration_secs: int | None = None


def _is_time_type(plan_type: str | None) -> bool:
    return (plan_type or "").lower() in ("time", "expirable", "time-trial", "timetrial")


class BalanceCache:
    """Balances per plan with a TTL, single-flight misses and stale fallback.

    The dictionaries are guarded by a lock so another thread may read them (:meth:`peek`);
    fetches, and the tasks behind them, only ever run on the plugin loop.
    """

    def __init__(
        self,
        core: PluginCore,
        *,
        ttl: float = BALANCE_TTL_SECS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core = core
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._fresh: dict[str, tuple[float, BalanceEntry]] = {}  # plan id -> (expiry, entry)
        self._stale: dict[str, BalanceEntry] = {}
        self._durations: dict[str, int] = {}  # plan facts never change: fetched once per plan
        self._inflight: dict[str, asyncio.Task[BalanceEntry | None]] = {}
        #: plan id -> why its balance could not be read last time (cleared when it is)
        self.failures: dict[str, str] = {}
        self._generation = 0
        #: Bumped by every change; :class:`BalanceContext` keys its ready-made text on it.
        self.version = 0
        self.fetches = 0

    def invalidate(self, plan_id: str | None = None) -> None:
        """Drop one plan's entry, or everything (login/logout) when ``plan_id`` is None."""
        with self._lock:
            self.version += 1
            if plan_id is not None:
                self._fresh.pop(plan_id, None)
                return
            self._generation += 1
            self._fresh.clear()
            self._stale.clear()
            inflight, self._inflight = list(self._inflight.values()), {}
        for task in inflight:
            task.cancel()

    def peek(self, plan_id: str) -> tuple[float, BalanceEntry] | None:
        """The fresh entry and its expiry, from any thread; ``None`` when absent or expired."""
        with self._lock:
            item = self._fresh.get(plan_id)
        if item is None or item[0] <= self.clock():
            return None
        return item

    def stale(self, plan_id: str) -> BalanceEntry | None:
        with self._lock:
            return self._stale.get(plan_id)

    def seen(self, plan_id: str, balance: PlanBalance, session: object) -> None:
        """Store a balance somebody else just read under ``session`` (a ``svc_checkBalance``
        call, perhaps on a host's thread). A balance read under a session that is no longer
        the core's is dropped: the generation is read before the session is compared, so a
        login or logout either shows here or discards the store (its invalidation follows the
        new session)."""
        with self._lock:
            old = self._stale.get(plan_id)
            generation = self._generation
        if self._core.session is not session:
            return
        duration = self._durations.get(plan_id)
        is_time = bool(duration) or _is_time_type(balance.plan_type)
        if (
            old is not None
            and old.balance == balance.balance
            and old.is_subscriber == balance.is_subscriber
            and old.is_time == is_time
            and old.duration_secs == (duration or None)
        ):  # unchanged: only its expiry moves, and a ready-made text stays valid
            self._store(old, generation, changed=False)
            return
        entry = BalanceEntry(
            plan_id=plan_id,
            name=old.name if old else balance.plan_name or plan_id,
            balance=balance.balance,
            is_subscriber=balance.is_subscriber,
            is_time=is_time,
            duration_secs=duration or None,
        )
        self._store(entry, generation)

    def _store(self, entry: BalanceEntry, generation: int, *, changed: bool = True) -> None:
        with self._lock:
            if generation != self._generation:  # a logout during the fetch discards it
                return
            if changed:
                self.version += 1
            self._fresh[entry.plan_id] = (self.clock() + self.ttl, entry)
            self._stale[entry.plan_id] = entry

    async def get(self, ref: PlanRef) -> BalanceEntry | None:
        """The balance, fetched at most once per TTL however many callers ask."""
        cached = self.peek(ref.plan_id)
        if cached is not None:
            return cached[1]
        task = self._inflight.get(ref.plan_id)
        if task is None:
            task = asyncio.ensure_future(self._fetch(ref, self._generation))
            self._inflight[ref.plan_id] = task
            task.add_done_callback(functools.partial(self._done, ref.plan_id))
        return await asyncio.shield(task)

    def _done(self, plan_id: str, task: asyncio.Task[BalanceEntry | None]) -> None:
        if self._inflight.get(plan_id) is task:
            del self._inflight[plan_id]

    async def _duration(self, plan_id: str) -> int:
        """A time plan's access period (0 for a credits plan); read once per plan."""
        known = self._durations.get(plan_id)
        if known is not None:
            return known
        try:
            plan = await self._core.public_client().get_plan(plan_id)
        except ServiceError as exc:
            log.info("plan %s unavailable: %s", plan_id, exc.code)
            return 0
        duration = int(plan.registry.credits.duration_secs)
        self._durations[plan_id] = duration
        return duration

    async def _fetch(self, ref: PlanRef, generation: int) -> BalanceEntry | None:
        self.fetches += 1
        try:
            balance, duration = await asyncio.gather(
                self._core.client().get_plan_balance(ref.plan_id), self._duration(ref.plan_id)
            )
        except ServiceError as exc:
            log.info("balance of plan %s unavailable: %s", ref.plan_id, exc.code)
            self.failures[ref.plan_id] = exc.message
            return None
        self.failures.pop(ref.plan_id, None)
        entry = BalanceEntry(
            plan_id=ref.plan_id,
            name=ref.name or balance.plan_name or ref.plan_id,
            balance=balance.balance,
            is_subscriber=balance.is_subscriber,
            is_time=duration > 0 or _is_time_type(balance.plan_type),
            duration_secs=duration or None,
        )
        self._store(entry, generation)
        return entry


def _span(secs: int) -> str:
    for unit, size in (("year", 365 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if (secs >= size and secs % size == 0) or secs >= 2 * size:
            count = round(secs / size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{secs} seconds"


def format_line(entry: BalanceEntry) -> str:
    head = f"- {quoted(entry.name, NAME_LIMIT)} (plan {one_line(entry.plan_id, 100)}): "
    if entry.is_time:
        window = ""
        if entry.duration_secs:
            window = f", each purchase gives {_span(entry.duration_secs)} of access"
        if entry.is_subscriber and entry.balance > 0:
            return head + f"time plan, access active{window}"
        return head + f"time plan, no active access (not subscribed){window}"
    status = "subscribed" if entry.is_subscriber else "not subscribed"
    return head + f"{plural(entry.balance, 'credit')}, {status}"


class BalanceContext:
    """The ``before_prompt_build`` hook's logic."""

    def __init__(self, core: PluginCore, cache: BalanceCache, budget: float = DEFAULT_BUDGET_SECS):
        self._core = core
        self.cache = cache
        self.budget = budget
        self._lock = threading.Lock()
        # (session, default plan, cache version) -> the text, valid until the expiry
        self._ready: tuple[object, str | None, int, float, str | None] | None = None
        self._told_logged_out = False
        core.on_session_change(self._session_changed)

    def _session_changed(self) -> None:
        with self._lock:
            if self._core.session is not None:
                self._told_logged_out = False  # a later logout is told again

    def plans(self) -> list[PlanRef]:
        """Configured plans, the default plan, then the plans this session bought or paid with
        (at most :data:`MAX_USED_PLANS` of those, the latest)."""
        refs = self._core.config.plan_refs()
        extra = [self._core.plan_id] if self._core.plan_id else []
        extra += list(self._core.used_plans)[-MAX_USED_PLANS:]
        for plan_id in extra:
            if all(r.plan_id != plan_id for r in refs):
                refs.append(PlanRef(plan_id=plan_id, payment_type=self._core.config.payment_type))
        return refs

    def _plans_key(self) -> str | None:
        """What the ready-made text depends on besides the session: default and used plans."""
        used = ",".join(self._core.used_plans)
        default = self._core.plan_id
        return f"{default}|{used}" if used else default

    def _logged_out_notice(self) -> str | None:
        """Once per logged-out spell: tell the model that the user can log in."""
        with self._lock:
            if self._told_logged_out:
                return None
            self._told_logged_out = True
        return LOGGED_OUT_NOTICE if self._core.identity is None else NO_ACCOUNT_NOTICE

    def peek(self) -> str | _Miss | None:
        """The context text when it can be given without a fetch, from any thread; else MISS.

        Logged out → the login notice the first time, then ``None``. Otherwise the text built by
        the last complete :meth:`text`, while its session, plans and cache entries are unchanged
        and fresh.
        """
        session = self._core.session
        if session is None:
            return self._logged_out_notice()
        with self._lock:
            ready = self._ready
        if (
            ready is not None
            and ready[0] is session
            and ready[1] == self._plans_key()
            and ready[2] == self.cache.version
            and self.cache.clock() < ready[3]
        ):
            return self._with_approvals(ready[4])
        return MISS

    def _with_approvals(self, text: str | None) -> str | None:
        """Pending purchases and the mandate left (``"human"`` approval), after the balances."""
        approvals = self._core.approvals
        lines = [] if approvals is None else approvals.context_lines(self._core.identity or "")
        if not lines:
            return text
        return "\n".join([*([text] if text else []), *lines])

    async def text(self) -> str | None:
        """The context text, the login notice once when logged out, or None. Never raises."""
        try:
            return self._with_approvals(await self._text())
        except Exception:  # the hook must never break a prompt
            log.exception("balance context failed")
            return None

    async def _text(self) -> str | None:
        session = self._core.session
        if session is None:
            return self._logged_out_notice()
        plan_default, version = self._plans_key(), self.cache.version
        refs = self.plans()
        if not refs:  # nothing to report until the session or default plan changes
            self._remember(session, plan_default, version, math.inf, None)
            return None
        tasks = {ref.plan_id: asyncio.ensure_future(self.cache.get(ref)) for ref in refs}
        done, _pending = await asyncio.wait(tasks.values(), timeout=self.budget)
        lines = []
        complete = True
        for ref in refs:
            task = tasks[ref.plan_id]
            entry = task.result() if task in done and not task.cancelled() else None
            complete = complete and entry is not None
            entry = entry or self.cache.stale(ref.plan_id)
            if entry is not None:
                lines.append(format_line(entry))
            elif (failure := self.cache.failures.get(ref.plan_id)) is not None:
                lines.append(  # logged in: say what failed, never "log in"
                    f"- plan {one_line(ref.plan_id, 100)}: balance unavailable "
                    f"({one_line(failure, 300)})"
                )
        text = "Payments service balance (svc plugin):\n" + "\n".join(lines) if lines else None
        if complete:  # every line fresh: later prompts can read it without the loop
            version = self.cache.version  # read first: a later invalidation makes it stale
            expiries = [item[0] for ref in refs if (item := self.cache.peek(ref.plan_id))]
            if len(expiries) == len(refs):
                self._remember(session, plan_default, version, min(expiries), text)
        return text

    def _remember(
        self, session: object, plan: str | None, version: int, expiry: float, text: str | None
    ) -> None:
        with self._lock:
            self._ready = (session, plan, version, expiry, text)
