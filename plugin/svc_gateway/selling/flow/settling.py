"""Settling a paid request, and the settles owed after an outage (the flow's second half).

Settle is retried on its ``agentRequestId`` (idempotent) only for transient failures; its
outcome is recorded in the stats, the admission book and, on an outage, the settle store,
which is retried in order until the service answers again. :class:`Settler` is a part the flow
holds; the state machine itself stays in :mod:`.flow`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from ...encoding import to_int
from ...redact import get_logger
from ...service import errors
from ...service.models import PaymentRequirement
from ...service.seller import Seller
from ..state.book import Admission
from ..state.protocols import AdmissionBook, SettleStore
from ..state.settle_journal import SettleJournal, default_queue_path
from ..state.settle_queue import PendingSettle
from ..state.stats import PaidStats
from .calls import PaidCall, Settled, SettleOutcome, answered, classify_settle_error, not_mine

log = get_logger("svc_gateway.paid")

#: queued settles claimed from the store at a time while draining
DRAIN_BATCH = 100
REPLAYED_TOKEN = "BCK.X402.0059"
#: why a settle that used up the paid budget is deferred (queued)
OVER_BUDGET = "no answer within the paid budget"


#: told how a queued settle ended: ``(agentRequestId, "settled" | "lost", receipt)``
QueuedListener = Callable[[str, str, dict[str, Any] | None], None]


class Settler:
    """Settle, record, and retry the owed settles; counts in ``stats``, closes claims in
    ``book``."""

    def __init__(
        self,
        seller: Seller,
        stats: PaidStats,
        book: AdmissionBook,
        *,
        queue: SettleStore | None = None,
        backoff: tuple[float, ...],
        queue_retry_secs: float,
    ) -> None:
        self.seller = seller
        self.stats = stats
        self.book = book
        #: the settle store; ``None`` until :meth:`start` (or the first deferred settle) opens
        #: the default one, the journal beside the credentials (it takes a lock: blocking I/O)
        self.queue: SettleStore | None = queue
        self.backoff = backoff
        self.queue_retry_secs = queue_retry_secs
        self.queued_listeners: list[QueuedListener] = []
        self._opening = asyncio.Lock()
        self._deferred: dict[str, Admission] = {}
        self._drainer: asyncio.Task[None] | None = None
        self._draining = False

    def _queued_ended(self, request_id: str, how: str, receipt: dict[str, Any] | None) -> None:
        for listener in self.queued_listeners:
            listener(request_id, how, receipt)

    async def release(self, call: PaidCall) -> None:
        if call.admission is not None:
            await self.book.release(call.admission)

    async def settle(self, call: PaidCall, queue: bool = True) -> SettleOutcome:
        """Settle within the budget; record the outcome in the stats, the book and (unless
        ``queue`` is False: the answer is then withheld) the queue.

        Without the queue a settle whose answer is lost would leave the payer charged for a
        withheld answer, so then no attempt may use more than half the budget: one that hangs
        (the service may have burned and its reply be late) is asked again on the same
        ``agentRequestId``, which answers an already-burned settle with its receipt."""
        budget = self.seller.settings.paid_budget_secs
        cap = budget / 2 if not queue and call.request_id else None
        try:
            outcome = await self._attempts(call, cap, budget)
        except asyncio.CancelledError:
            # the request was cancelled with the settle sent: it may have burned, so it is
            # owed like an outage's (queued, retried on its agentRequestId), unless the answer
            # is withheld (nothing delivered, nothing owed)
            gone = SettleOutcome(Settled.DEFERRED, "the request was cancelled while settling")
            await asyncio.shield(self._record(call, gone, queue=queue))
            raise
        if outcome.kind is Settled.PAID:
            await self._paid(call, outcome)
        else:
            await self._record(call, outcome, queue=queue)
        return outcome

    async def _attempts(
        self, call: PaidCall, cap: float | None = None, budget: float | None = None
    ) -> SettleOutcome:
        """The one settle loop: retries (same ``agentRequestId``) only transient failures, and
        only with an id: without one a replay could burn twice, so then there is exactly one
        attempt. ``cap`` bounds each attempt (one over it counts as transient: asked again);
        ``budget`` all of them, pauses included (past it: deferred). Both are the service
        call's own deadline (the ``total`` timeout of its exchange), so no extra timer runs."""
        clock = time.monotonic
        end = None if budget is None else clock() + budget
        attempts = len(self.backoff) + 1 if call.request_id else 1
        reason = "not attempted"
        for attempt in range(1, attempts + 1):
            within = cap
            if end is not None:
                left = end - clock()
                if left <= 0:
                    return SettleOutcome(Settled.DEFERRED, OVER_BUDGET)
                within = left if cap is None else min(cap, left)
            try:
                result = await self.seller.client().settle(
                    call.envelope,
                    call.token,
                    call.amount,
                    call.request_id,
                    envelope_json=call.envelope_json,
                    within=within,
                )
            except errors.ServiceError as exc:
                reason = f"{exc.code}: {exc.message}"
                kind = classify_settle_error(exc)
                if kind is not None:
                    return SettleOutcome(kind, reason)
            except Exception as exc:  # a closed client, a bug: never the client's problem
                reason = type(exc).__name__
            else:
                return answered(result)
            if attempt < attempts:
                pause = self.backoff[attempt - 1]
                if end is not None and clock() + pause >= end:
                    return SettleOutcome(Settled.DEFERRED, OVER_BUDGET)
                await asyncio.sleep(pause)
        if end is not None and clock() >= end:
            return SettleOutcome(Settled.DEFERRED, OVER_BUDGET)
        return SettleOutcome(Settled.DEFERRED, reason)

    async def _paid(self, call: PaidCall, outcome: SettleOutcome) -> None:
        """Count a paid settle and close its claim in the book."""
        assert outcome.receipt is not None and outcome.result is not None
        redeemed = outcome.result.credits_redeemed or 0  # the receipt's creditsRedeemed
        self.stats.settled += 1
        self.stats.credits_settled += redeemed
        self.stats.receipts.append(outcome.receipt)
        if self.stats.settle_queue:
            self.kick_queue()  # the service is answering again
        if call.admission is not None:
            await self.book.settled(call.admission, redeemed, outcome.result.remaining_balance)

    async def _record(self, call: PaidCall, outcome: SettleOutcome, *, queue: bool = True) -> None:
        """Record a settle that did not pay (:meth:`_paid` records one that did)."""
        plan_id = call.envelope.accepts[0].plan_id if call.envelope.accepts else "?"
        payer = call.payer or "unknown"
        self.stats.settle_failures += 1
        if outcome.kind is Settled.REFUSED:
            self.stats.settle_refused += 1
            if call.admission is not None:
                if REPLAYED_TOKEN in outcome.reason:
                    await self.book.release(call.admission)
                else:
                    await self.book.refused(call.admission)
            log.warning(
                "settle refused for agentRequestId %s (payer %s, plan %s): %s; answer withheld, "
                "402",
                call.request_id,
                payer,
                plan_id,
                outcome.reason,
            )
            return
        if not queue:  # the answer is withheld, so nothing is owed: never queued
            await self.release(call)
            log.error(
                "settle failed for agentRequestId %s (payer %s, plan %s): %s; the answer was "
                "withheld (not delivered unpaid), nothing queued",
                call.request_id,
                payer,
                plan_id,
                outcome.reason,
            )
            return
        if outcome.kind is Settled.DEFERRED and call.request_id:
            store = await self.store()
            dropped = await store.add(
                PendingSettle(
                    request_id=call.request_id,
                    plan_id=plan_id,
                    payer=call.payer,
                    amount=call.amount,
                    token=call.token,
                    envelope=call.envelope.wire(),
                    queued_at=time.time(),
                )
            )
            if call.admission is not None:  # still owed: the credits stay claimed until paid
                self._deferred[call.request_id] = await self._owe(call.admission, call.request_id)
            for request_id in dropped or ():  # a full queue dropped it: it will not be paid
                admission = self._deferred.pop(request_id, None)
                if admission is not None:
                    await self.book.release(admission)
            self.stats.settle_queue = await store.count()
            # counted once the queue holds it, so a reader never sees a deferred settle that is
            # not yet queued (the stats move together)
            self.stats.settle_deferred += 1
            log.error(
                "settle failed for agentRequestId %s (payer %s, plan %s): %s; the answer was "
                "delivered (200) and the settle is queued for retry",
                call.request_id,
                payer,
                plan_id,
                outcome.reason,
            )
            self.kick_queue(delay=self.queue_retry_secs)
            return
        self.stats.settle_lost += 1
        await self.release(call)
        log.error(
            "settle failed for agentRequestId %s (payer %s, plan %s): %s; the answer was "
            "delivered without payment",
            call.request_id,
            payer,
            plan_id,
            outcome.reason,
        )

    def kick_queue(self, delay: float = 0.0) -> None:
        """Retry the queue soon (no-op while a retry is already scheduled or running)."""
        drainer = self._drainer
        if drainer is not None and not drainer.done():
            if self._draining or delay > 0:
                return
            drainer.cancel()  # it is sleeping until a later retry: retry now instead
        self._drainer = asyncio.get_running_loop().create_task(self._drain_loop(delay))

    async def store(self) -> SettleStore:
        """The settle store, opened on first use (a second endpoint on the same file refuses
        to start: :class:`SettleQueueLocked`)."""
        if self.queue is None:
            async with self._opening:
                if self.queue is None:
                    self.queue = await SettleJournal.open(default_queue_path(self.seller.settings))
        return self.queue

    async def start(self) -> int:
        """Count the settles a previous run left owed as in flight for their payers (until
        they settle or are given up: those credits are not for sale again) and start retrying
        them. Returns how many are owed."""
        store = await self.store()
        owed = await store.entries()
        for entry in owed:
            if entry.payer and entry.request_id not in self._deferred:
                self._deferred[entry.request_id] = await self.book.restore(
                    entry.plan_id, entry.payer, entry.amount, entry.request_id
                )
        self.stats.settle_queue = len(owed)
        if owed:
            self.kick_queue()
        return len(owed)

    async def stop(self) -> None:
        """Stop retrying the queue (the store stays open: the flow closes it)."""
        drainer, self._drainer = self._drainer, None
        if drainer is not None and not drainer.done():
            drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drainer

    async def _drain_loop(self, delay: float) -> None:
        store = await self.store()
        while await store.count():
            if delay > 0:
                await asyncio.sleep(delay)
            await self.drain_queue()
            delay = self.queue_retry_secs

    async def drain_queue(self) -> int:
        """Retry each queued settle this process may claim once, oldest first; stop at the
        first outage. Returns how many were settled."""
        if self._draining:
            return 0
        store = await self.store()
        self._draining = True
        done = 0
        seen: set[str] = set()
        try:
            while batch := [e for e in await store.claim(DRAIN_BATCH) if e.request_id not in seen]:
                for entry in batch:
                    seen.add(entry.request_id)
                    outcome = await self._retry_queued(entry)
                    if outcome is None:
                        return done
                    done += outcome
        finally:
            self._draining = False
            self.stats.settle_queue = await store.count()
        return done

    async def _retry_queued(self, entry: PendingSettle) -> int | None:
        """1: settled, 0: given up (dropped), None: still unreachable (kept)."""
        try:
            envelope = PaymentRequirement.model_validate(entry.envelope)
        except ValueError as exc:  # an unreadable entry: keeping it would block the queue
            return await self._give_up(entry, type(exc).__name__)
        try:
            async with asyncio.timeout(self.seller.settings.paid_budget_secs):
                client = self.seller.client()
                result = await client.settle(envelope, entry.token, entry.amount, entry.request_id)
        except errors.ServiceError as exc:
            kind = classify_settle_error(exc)
            if kind is None or kind is Settled.DEFERRED:
                return None
            if not_mine(exc):  # another seller's settle: left for its owner, never "lost"
                log.warning(
                    "queued settle for agentRequestId %s (plan %s) is not this seller's to "
                    "settle (%s); left in the queue for the plan's owner",
                    entry.request_id,
                    entry.plan_id,
                    exc.code,
                )
                return 0
            return await self._give_up(entry, f"{exc.code}: {exc.message}")
        except Exception:  # a timeout, a closed client: try again later
            return None
        if not result.success:
            return await self._give_up(entry, result.error_reason or "success: false")
        receipt = result.receipt()
        redeemed = to_int(receipt["creditsRedeemed"])
        self.stats.settled += 1
        self.stats.settle_recovered += 1
        self.stats.credits_settled += redeemed
        self.stats.receipts.append(receipt)
        admission = await self._owed_claim(entry)
        if admission is not None:
            await self.book.settled(admission, redeemed, result.remaining_balance)
        store = await self.store()
        await store.remove(entry.request_id)
        self._queued_ended(entry.request_id, "settled", receipt)
        log.info(
            "queued settle for agentRequestId %s (payer %s) succeeded: %d credits",
            entry.request_id,
            entry.payer or "unknown",
            redeemed,
        )
        return 1

    async def _owe(self, admission: Admission, request_id: str) -> Admission:
        """The request's claim becomes an owed settle's (a shared book keeps that one until
        the settle is paid or given up, whichever replica retries it)."""
        owed = await self.book.restore(
            admission.plan_id, admission.payer, admission.amount, request_id
        )
        await self.book.release(admission)
        return owed

    async def _owed_claim(self, entry: PendingSettle) -> Admission | None:
        """The owed claim of a queued settle, to close once it is paid or given up; one this
        replica does not hold (queued by another replica on a shared book) is restored first."""
        admission = self._deferred.pop(entry.request_id, None)
        if admission is None and entry.payer:  # owed by another replica (shared state)
            admission = await self.book.restore(
                entry.plan_id, entry.payer, entry.amount, entry.request_id
            )
        return admission

    async def _give_up(self, entry: PendingSettle, reason: str) -> int:
        self.stats.settle_lost += 1
        admission = await self._owed_claim(entry)
        if admission is not None:
            await self.book.release(admission)
        store = await self.store()
        await store.remove(entry.request_id)
        self._queued_ended(entry.request_id, "lost", None)
        log.error(
            "queued settle for agentRequestId %s (payer %s, plan %s) refused: %s; the answer "
            "was delivered without payment",
            entry.request_id,
            entry.payer or "unknown",
            entry.plan_id,
            reason,
        )
        return 0
