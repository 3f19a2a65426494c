"""One paid request, as the state table of SPEC.md ("States and transitions") draws it.

received → (no token | verify invalid | too few credits) → 402 with the envelope · (verify
valid, credits admitted) → verified → handler non-2xx, exception or timeout, or its client
gone → no settle, no charge · handler 2xx → settle (retried on its ``agentRequestId``, which
makes it idempotent) → receipt in ``payment-response``. The admission is closed on every path,
a cancelled request included.

When settle fails:

* the service refuses to burn (``success: false``, 402, 403 ``BCK.X402.*`` such as a replayed
  v3 token, ``BCK.X402.0059``): the payer did not pay, so the answer is withheld: 402;
* the service is unreachable, or rejects this gateway's own key: not the payer's fault, and the
  answer already exists, so per SPEC the client gets its 2xx (without a receipt); the settle
  goes to a persistent queue retried later on the same ``agentRequestId``, and is counted in
  :class:`PaidStats` and logged with the request id and the payer;
* any other definitive refusal (400, 404): the client gets its 2xx, the loss is counted and
  logged; retrying cannot change it.

Exact billing (:mod:`.billing`): verify reserves nothing, so the endpoint admits a request only
when the payer's known balance covers the credits already in flight plus this one. A time plan
is not metered (verify checks the access window; settle burns nothing).

Deadlines: the service calls before the handler (plan, balance, verify) share one budget
(``paidBudgetSecs``, over it 503), the handler has its own (``handlerTimeoutSecs``, over it
504, not charged), and settling has the budget again (over it: queued, as an outage).

Reasons the service itself cannot answer (network, 5xx, 429, our own key rejected) are the
operator's problem, not the payer's: they answer 503/502, never 402. Runs on the plugin loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import errors
from ..core import PluginCore
from ..encoding import b64_json, decode_access_token, to_int, token_authorization
from ..models import PaymentRequirement, SettleResult, VerifyResult
from ..redact import get_logger
from .billing import Admission, CreditBook, Refusal
from .handlers import (
    AgentHandler,
    Answer,
    CreditsFn,
    HandlerError,
    SyncHandlerPool,
    call_maybe_async,
    run_handler,
)
from .plans import OUTAGE_ERRORS, PlanFacts, PlanFactsCache, build_envelope
from .settle_journal import SettleJournal
from .settle_queue import QUEUE_FILE, PendingSettle
from .shared_state import StateUnavailable
from .state import AdmissionBook, SettleStore

log = get_logger("svc_gateway.paid")

#: a longer ``payment-signature`` is no token we issued; refused without asking the service
MAX_TOKEN_CHARS = 16384
#: what a token is made of (JWT or base64url/base64 JSON); anything else is refused unasked
TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/=-]+")
#: pauses between settle attempts (so 3 attempts); settle is idempotent on agentRequestId
SETTLE_BACKOFF_SECS: tuple[float, ...] = (0.2, 0.5)
#: paid requests handled at once; more get 503 so pending work (and memory) stays bounded
MAX_IN_FLIGHT = 256
RECEIPTS_KEPT = 100
#: envelopes kept prebuilt (one per plan facts, agent id and URL seen)
ENVELOPES_KEPT = 64
RETRY_AFTER_SECS = 5
#: how often the settle queue is retried while it holds entries
QUEUE_RETRY_SECS = 30.0
#: queued settles claimed from the store at a time while draining
DRAIN_BATCH = 100
REPLAYED_TOKEN = "BCK.X402.0059"

GUIDANCE = (
    "Order the plan (svc_orderPlan, or svc_orderFiatPlan for a card plan), get an access token "
    "for it (svc_getAccessToken), and send the token in the payment-signature header."
)


@dataclass
class PaidStats:
    """Counters the builder can read (the demo checks its receipts against the subscriber's).

    ``abandoned``: answers ready after their client went away (not settled, not charged);
    ``settle_deferred``: answers delivered while settle could not reach the service (queued);
    ``settle_recovered``: queued settles that later succeeded; ``settle_lost``: answers
    delivered that will never be paid (the service refused the settle for a reason that is not
    the payer's, or a queued entry could not be kept); ``settle_queue``: queued right now."""

    requests: int = 0
    refused: int = 0
    unavailable: int = 0
    handler_failures: int = 0
    handler_timeouts: int = 0
    abandoned: int = 0
    settled: int = 0
    credits_settled: int = 0
    settle_failures: int = 0
    settle_refused: int = 0
    settle_deferred: int = 0
    settle_recovered: int = 0
    settle_lost: int = 0
    settle_queue: int = 0
    receipts: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECEIPTS_KEPT))


class Settled(enum.Enum):
    PAID = "paid"  # receipt attached
    REFUSED = "refused"  # the payer did not pay: answer withheld, 402
    DEFERRED = "deferred"  # outage: 2xx without receipt, queued for retry
    LOST = "lost"  # definitive failure that is not the payer's: 2xx, logged, counted


@dataclass(frozen=True)
class SettleOutcome:
    kind: Settled
    reason: str = ""
    receipt: dict[str, Any] | None = None
    result: SettleResult | None = None


@dataclass(frozen=True)
class PaidCall:
    """What a verified, admitted request carries to settle."""

    envelope: PaymentRequirement
    token: str
    amount: int
    request_id: str | None
    payer: str | None
    admission: Admission | None


def error_answer(status: int, error: str, message: str, **headers: str) -> Answer:
    return Answer.json(status, {"error": error, "message": message}, headers)


def token_payer(token: str) -> str | None:
    """``payload.authorization.from`` of the token, when it decodes (never raises)."""
    decoded = decode_access_token(token)
    if decoded is None:
        return None
    payer = token_authorization(decoded).get("from")
    return payer if isinstance(payer, str) and payer else None


def verified_balance(verdict: VerifyResult) -> int | None:
    """``agentRequest.balance.balance`` of a verify answer (WIRE.md §4), when it reads."""
    balance = (verdict.agent_request or {}).get("balance")
    value = balance.get("balance") if isinstance(balance, dict) else None
    try:
        return int(value) if isinstance(value, int | str) and not isinstance(value, bool) else None
    except ValueError:
        return None


def classify_settle_error(exc: BaseException) -> Settled | None:
    """What a settle exception means; ``None``: transient, worth another attempt."""
    if isinstance(exc, errors.PaymentRequired) or (
        isinstance(exc, errors.PermissionDenied) and exc.code.startswith("BCK.X402.")
    ):
        return Settled.REFUSED
    if isinstance(exc, errors.AuthenticationError | errors.NotLoggedIn):
        return Settled.DEFERRED  # our own key: retried from the queue once the operator logs in
    if isinstance(exc, errors.PermissionDenied | errors.NotFound | errors.InvalidRequest):
        return Settled.LOST
    return None


class PaidFlow:
    """Verify → admit → handler → settle for one endpoint; plan and agent ids are read per
    request."""

    def __init__(
        self,
        core: PluginCore,
        *,
        handler: AgentHandler,
        credits: CreditsFn | None = None,
        plan_id: str | None = None,
        agent_id: str | None = None,
        facts: PlanFactsCache | None = None,
        settle_backoff: tuple[float, ...] = SETTLE_BACKOFF_SECS,
        max_in_flight: int = MAX_IN_FLIGHT,
        queue: SettleStore | None = None,
        book: AdmissionBook | None = None,
        queue_retry_secs: float = QUEUE_RETRY_SECS,
    ) -> None:
        self.core = core
        self.handler = handler
        self.credits = credits
        self.explicit_plan_id = plan_id
        self.explicit_agent_id = agent_id
        self.facts_cache = facts or PlanFactsCache()
        self.settle_backoff = settle_backoff
        self.max_in_flight = max_in_flight
        self.queue_retry_secs = queue_retry_secs
        self.stats = PaidStats()
        self.book: AdmissionBook = book if book is not None else CreditBook(self._read_balance)
        #: the settle store; ``None`` until :meth:`start` (or the first deferred settle) opens
        #: the default one, the journal beside the credentials (it takes a lock: blocking I/O)
        self.queue: SettleStore | None = queue
        self._opening = asyncio.Lock()
        self._deferred: dict[str, Admission] = {}
        self.handler_pool = SyncHandlerPool()
        self._in_flight = 0
        self._envelopes: dict[tuple[PlanFacts, str | None, str], PaymentRequirement] = {}
        self._drainer: asyncio.Task[None] | None = None
        self._draining = False

    # -- which plan and agent ------------------------------------------------------------------

    def plan_id(self) -> str | None:
        """Precedence: explicit argument > ``core.plan_id`` (svc_registerAgent updates it) >
        config ``planId`` > the first of config ``plans``."""
        config = self.core.config
        first = config.plans[0].plan_id if config.plans else None
        return self.explicit_plan_id or self.core.plan_id or config.plan_id or first

    def agent_id(self) -> str | None:
        return self.explicit_agent_id or self.core.agent_id or self.core.config.agent_id

    async def facts(self, plan_id: str) -> PlanFacts:
        """The plan's scheme/network/bounds (cached 5 min); raises on a service outage."""
        fetch = self.core.public_client().get_plan
        return await self.facts_cache.get(plan_id, fetch, self.core.environment)

    async def _read_balance(self, plan_id: str, payer: str) -> int:
        balance = await self.core.public_client().get_plan_balance(plan_id, payer)
        return balance.balance

    # -- the state machine ---------------------------------------------------------------------

    async def serve(
        self,
        prompt: str,
        token: str | None,
        url: str,
        connected: Callable[[], bool] | None = None,
    ) -> Answer:
        """Answer one well-formed request (the HTTP layer has checked method, size, JSON).
        ``connected`` says whether the client is still there to receive the answer; asked just
        before settling (a client gone is never charged for an answer it cannot receive)."""
        if self._in_flight >= self.max_in_flight:
            self.stats.unavailable += 1
            return error_answer(
                503,
                "Service Unavailable",
                "The agent is busy; nothing was charged. Retry in a second.",
                **{"Retry-After": "1"},
            )
        self._in_flight += 1
        self.stats.requests += 1
        try:
            return await self._serve(prompt, token, url, connected)
        finally:
            self._in_flight -= 1

    async def _serve(
        self, prompt: str, token: str | None, url: str, connected: Callable[[], bool] | None
    ) -> Answer:
        plan_id = self.plan_id()
        if plan_id is None:
            self.stats.unavailable += 1
            return error_answer(
                503,
                "Service Unavailable",
                "This agent is not selling yet: no plan is configured (its operator sets planId "
                "or registers one with svc_registerAgent). Nothing was charged.",
            )
        if self.handler_pool.stuck:
            return self._stuck()
        budget = asyncio.timeout(self.core.config.paid_budget_secs)
        try:
            async with budget:
                admitted = await self._admit(plan_id, prompt, token, url)
        except TimeoutError:
            if not budget.expired():
                raise
            return self._outage(None, "verify a payment in time")
        if isinstance(admitted, Answer):
            return admitted
        return await self._work(admitted, prompt, connected)

    async def _admit(
        self, plan_id: str, prompt: str, token: str | None, url: str
    ) -> Answer | PaidCall:
        """received → 402 / 503 / 502, or a verified call whose credits are claimed."""
        agent_id = self.agent_id()
        try:
            facts = await self.facts(plan_id)
        except OUTAGE_ERRORS as exc:
            return self._outage(exc, "read the plan")
        if not token:
            return self._refuse(facts, agent_id, url, "No payment-signature header was sent")
        if len(token) > MAX_TOKEN_CHARS or not TOKEN_RE.fullmatch(token):
            return self._refuse(facts, agent_id, url, "The payment-signature is not a valid token")
        try:
            amount = facts.clamp(await self._price({"prompt": prompt}))
        except Exception as exc:
            log.error("the credits function failed (%s); request refused", type(exc).__name__)
            return error_answer(
                500, "Internal Server Error", "The agent could not price this request."
            )
        envelope = self._envelope(facts, agent_id, url)
        try:
            client = self.core.client()
            verdict = await client.verify(envelope, token, amount)
        except errors.ServiceError as exc:
            return self._verify_failed(exc, facts, agent_id, url)
        if not verdict.is_valid:
            reason = verdict.invalid_reason or "The access token was not accepted"
            log.info("payment refused on plan %s: %s", plan_id, reason)
            return self._refuse(facts, agent_id, url, reason)
        payer = verdict.payer or token_payer(token)
        admission: Admission | None = None
        if payer and not facts.is_time:  # access to a time plan is not metered per request
            try:
                claim = await self.book.admit(plan_id, payer, amount, verified_balance(verdict))
            except StateUnavailable as exc:
                return self._state_outage(exc)
            except OUTAGE_ERRORS as exc:
                return self._outage(exc, "read the payer's balance")
            except errors.ServiceError as exc:
                # verify accepted the token; settle will still refuse a payer who cannot pay
                log.warning("could not read payer %s's balance (%s); not metered", payer, exc.code)
                claim = None
            if isinstance(claim, Refusal):
                return self._refuse(facts, agent_id, url, claim.reason)
            admission = claim
        return PaidCall(envelope, token, amount, verdict.request_id, payer, admission)

    async def _work(
        self, call: PaidCall, prompt: str, connected: Callable[[], bool] | None = None
    ) -> Answer:
        """verified → work done / work failed → settled / unsettled. The admission is closed on
        every path: by the settle's outcome once settling starts, else released here (also when
        the request is cancelled: a client gone, a host that cancels its handlers)."""
        settling = False
        try:
            answer = await self._handle(prompt)
            if not answer.ok:
                return answer
            if connected is not None and not connected():
                return self._abandoned(call)
            settling = True
            outcome = await self._settle(call)
        finally:
            if not settling:
                await asyncio.shield(self._release(call))
        if outcome.kind is Settled.PAID:
            assert outcome.receipt is not None
            receipt_header = ("payment-response", b64_json(outcome.receipt))
            return replace(answer, headers=(*answer.headers, receipt_header))
        if outcome.kind is Settled.REFUSED:
            return self._refuse_settle(call, outcome.reason)
        return answer

    async def _handle(self, prompt: str) -> Answer:
        """The handler's answer within ``handlerTimeoutSecs``, or the error answer (not charged)
        its failure gets. A cancellation from outside (the request is gone) propagates."""
        deadline = asyncio.timeout(self.core.config.handler_timeout_secs)
        try:
            async with deadline:
                answer = await run_handler(self.handler, prompt, self.handler_pool)
        except (Exception, asyncio.CancelledError) as exc:
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
                raise  # cancelled from outside, not a handler's own CancelledError
            if isinstance(exc, TimeoutError) and deadline.expired():
                self.stats.handler_timeouts += 1
                log.warning(
                    "agent handler took longer than %g s; answered 504, not charged",
                    self.core.config.handler_timeout_secs,
                )
                return error_answer(
                    504,
                    "Gateway Timeout",
                    "The agent did not answer in time; nothing was charged.",
                )
            self.stats.handler_failures += 1
            if isinstance(exc, HandlerError):
                log.error("agent handler answer unusable: %s; not charged", exc)
            else:
                log.error("agent handler raised %s; not charged", type(exc).__name__, exc_info=exc)
            return error_answer(
                500, "Internal Server Error", "The agent failed to answer; nothing was charged."
            )
        if not answer.ok:
            self.stats.handler_failures += 1
            log.info("agent handler answered %s; not settled, not charged", answer.status)
        return answer

    def _abandoned(self, call: PaidCall) -> Answer:
        """The client left before its answer was ready: nothing delivered, nothing settled."""
        self.stats.abandoned += 1
        log.info(
            "the client of agentRequestId %s (payer %s) went away before the answer was ready; "
            "not settled, not charged",
            call.request_id,
            call.payer or "unknown",
        )
        return error_answer(
            499, "Client Closed Request", "The client went away; nothing was charged."
        )

    async def _release(self, call: PaidCall) -> None:
        if call.admission is not None:
            await self.book.release(call.admission)

    def _envelope(self, facts: PlanFacts, agent_id: str | None, url: str) -> PaymentRequirement:
        """The request's envelope, built once per (plan facts, agent, URL) and then shared
        (never mutated: a refusal copies it)."""
        key = (facts, agent_id, url)
        envelope = self._envelopes.get(key)
        if envelope is None:
            if len(self._envelopes) >= ENVELOPES_KEPT:
                self._envelopes.clear()
            envelope = self._envelopes[key] = build_envelope(facts, agent_id, url)
        return envelope

    async def _price(self, request: dict[str, Any]) -> int:
        if self.credits is None:
            return self.core.config.credits_per_request
        value = await call_maybe_async(self.credits, request)
        if isinstance(value, bool) or not isinstance(value, int):
            raise HandlerError("the credits function must return an int")
        return value

    # -- settling ------------------------------------------------------------------------------

    async def _settle(self, call: PaidCall) -> SettleOutcome:
        """Settle within the budget; record the outcome in the stats, the book and the queue."""
        budget = asyncio.timeout(self.core.config.paid_budget_secs)
        try:
            async with budget:
                outcome = await self._settle_attempts(call)
        except TimeoutError:
            if not budget.expired():  # pragma: no branch - _settle_attempts catches every Exception
                raise
            outcome = SettleOutcome(Settled.DEFERRED, "no answer within the paid budget")
        except asyncio.CancelledError:
            # the request was cancelled with the settle sent: it may have burned, so it is
            # owed like an outage's (queued, retried on its agentRequestId)
            gone = SettleOutcome(Settled.DEFERRED, "the request was cancelled while settling")
            await asyncio.shield(self._record(call, gone))
            raise
        await self._record(call, outcome)
        return outcome

    async def _settle_attempts(self, call: PaidCall) -> SettleOutcome:
        """Retries (same ``agentRequestId``) only transient failures, and only with an id:
        without one a replay could burn twice, so then there is exactly one attempt."""
        attempts = len(self.settle_backoff) + 1 if call.request_id else 1
        reason = "not attempted"
        for attempt in range(1, attempts + 1):
            try:
                client = self.core.client()
                result = await client.settle(
                    call.envelope, call.token, call.amount, call.request_id
                )
            except errors.ServiceError as exc:
                reason = f"{exc.code}: {exc.message}"
                kind = classify_settle_error(exc)
                if kind is not None:
                    return SettleOutcome(kind, reason)
            except Exception as exc:  # a closed client, a bug: still never the client's problem
                reason = type(exc).__name__
            else:
                if result.success:
                    return SettleOutcome(Settled.PAID, receipt=result.receipt(), result=result)
                # the service answered and burned nothing: the payer did not pay
                return SettleOutcome(
                    Settled.REFUSED, result.error_reason or "the service answered success: false"
                )
            if attempt < attempts:
                await asyncio.sleep(self.settle_backoff[attempt - 1])
        return SettleOutcome(Settled.DEFERRED, reason)

    async def _record(self, call: PaidCall, outcome: SettleOutcome) -> None:
        plan_id = call.envelope.accepts[0].plan_id if call.envelope.accepts else "?"
        payer = call.payer or "unknown"
        if outcome.kind is Settled.PAID:
            assert outcome.receipt is not None and outcome.result is not None
            redeemed = to_int(outcome.receipt["creditsRedeemed"])
            self.stats.settled += 1
            self.stats.credits_settled += redeemed
            self.stats.receipts.append(outcome.receipt)
            if call.admission is not None:
                await self.book.settled(call.admission, redeemed, outcome.result.remaining_balance)
            if self.stats.settle_queue:
                self.kick_queue()  # the service is answering again
            return
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
        if outcome.kind is Settled.DEFERRED and call.request_id:
            self.stats.settle_deferred += 1
            store = await self._store()
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
        await self._release(call)
        log.error(
            "settle failed for agentRequestId %s (payer %s, plan %s): %s; the answer was "
            "delivered without payment",
            call.request_id,
            payer,
            plan_id,
            outcome.reason,
        )

    # -- the settle queue ----------------------------------------------------------------------

    def kick_queue(self, delay: float = 0.0) -> None:
        """Retry the queue soon (no-op while a retry is already scheduled or running)."""
        drainer = self._drainer
        if drainer is not None and not drainer.done():
            if self._draining or delay > 0:
                return
            drainer.cancel()  # it is sleeping until a later retry: retry now instead
        self._drainer = asyncio.get_running_loop().create_task(self._drain_loop(delay))

    async def _store(self) -> SettleStore:
        """The settle store, opened on first use (a second endpoint on the same file refuses
        to start: :class:`SettleQueueLocked`)."""
        if self.queue is None:
            async with self._opening:
                if self.queue is None:
                    self.queue = await SettleJournal.open(default_queue_path(self.core))
        return self.queue

    async def start(self) -> int:
        """Count the settles a previous run left owed as in flight for their payers (until
        they settle or are given up: those credits are not for sale again) and start retrying
        them. Returns how many are owed."""
        store = await self._store()
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

    async def _drain_loop(self, delay: float) -> None:
        store = await self._store()
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
        store = await self._store()
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
            async with asyncio.timeout(self.core.config.paid_budget_secs):
                client = self.core.client()
                result = await client.settle(envelope, entry.token, entry.amount, entry.request_id)
        except errors.ServiceError as exc:
            kind = classify_settle_error(exc)
            if kind is None or kind is Settled.DEFERRED:
                return None
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
        admission = self._deferred.pop(entry.request_id, None)
        if admission is None and entry.payer:  # owed by another replica (shared state)
            admission = await self.book.restore(
                entry.plan_id, entry.payer, entry.amount, entry.request_id
            )
        if admission is not None:
            await self.book.settled(admission, redeemed, result.remaining_balance)
        store = await self._store()
        await store.remove(entry.request_id)
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

    async def _give_up(self, entry: PendingSettle, reason: str) -> int:
        self.stats.settle_lost += 1
        admission = self._deferred.pop(entry.request_id, None)
        if admission is None and entry.payer:  # owed by another replica (shared state)
            admission = await self.book.restore(
                entry.plan_id, entry.payer, entry.amount, entry.request_id
            )
        if admission is not None:
            await self.book.release(admission)
        store = await self._store()
        await store.remove(entry.request_id)
        log.error(
            "queued settle for agentRequestId %s (payer %s, plan %s) refused: %s; the answer "
            "was delivered without payment",
            entry.request_id,
            entry.payer or "unknown",
            entry.plan_id,
            reason,
        )
        return 0

    async def aclose(self) -> None:
        drainer, self._drainer = self._drainer, None
        if drainer is not None and not drainer.done():
            drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drainer
        self.handler_pool.shutdown()
        if self.queue is not None:
            await self.queue.aclose()
        await self.book.aclose()

    # -- refusals ------------------------------------------------------------------------------

    def _refuse(self, facts: PlanFacts, agent_id: str | None, url: str, reason: str) -> Answer:
        self.stats.refused += 1
        envelope = build_envelope(facts, agent_id, url, error=reason)
        return self._payment_required(envelope, reason)

    def _refuse_settle(self, call: PaidCall, reason: str) -> Answer:
        self.stats.refused += 1
        envelope = call.envelope.model_copy(update={"error": reason})
        return self._payment_required(envelope, f"The payment was not accepted ({reason})")

    @staticmethod
    def _payment_required(envelope: PaymentRequirement, reason: str) -> Answer:
        body = {"error": "Payment Required", "message": f"{reason}. {GUIDANCE}", "reason": reason}
        return Answer.json(402, body, {"payment-required": b64_json(envelope.wire())})

    def _state_outage(self, exc: StateUnavailable) -> Answer:
        """The shared state store did not answer: fail closed, before the handler."""
        self.stats.unavailable += 1
        log.warning("paid request refused: %s", exc.message)
        return error_answer(
            503,
            "Service Unavailable",
            "The agent cannot check your credits right now (its shared billing state is "
            f"unreachable); nothing was charged. Retry in {RETRY_AFTER_SECS} s.",
            **{"Retry-After": str(RETRY_AFTER_SECS)},
        )

    def _stuck(self) -> Answer:
        """Every thread of the sync handler still runs a request that timed out: new work
        would only wait for a 504. Refused before verify, so nothing is charged."""
        self.stats.unavailable += 1
        log.warning(
            "all %d threads of the agent handler are still running requests that timed out; "
            "new requests get 503 until one returns",
            self.handler_pool.workers,
        )
        return error_answer(
            503,
            "Service Unavailable",
            "The agent is overloaded (its earlier requests are still running); nothing was "
            f"charged. Retry in {RETRY_AFTER_SECS} s.",
            **{"Retry-After": str(RETRY_AFTER_SECS)},
        )

    def _outage(self, exc: errors.ServiceError | None, doing: str) -> Answer:
        self.stats.unavailable += 1
        code = exc.code if exc is not None else "timeout"
        log.warning("could not %s: the payment service is unavailable (%s)", doing, code)
        retry = getattr(exc, "retry_after", None)
        seconds = (
            str(max(1, min(round(retry), 300)))
            if isinstance(retry, int | float)
            else str(RETRY_AFTER_SECS)
        )
        return error_answer(
            503,
            "Service Unavailable",
            "The payment service could not be reached to verify your payment; nothing was "
            f"charged. Retry in {seconds} s.",
            **{"Retry-After": seconds},
        )

    def _verify_failed(
        self, exc: errors.ServiceError, facts: PlanFacts, agent_id: str | None, url: str
    ) -> Answer:
        """Map a failed verify call: the payer's fault → 402, the service's or ours → 503/502."""
        if isinstance(exc, errors.PaymentRequired) or (
            isinstance(exc, errors.PermissionDenied) and exc.code.startswith("BCK.X402.")
        ):
            return self._refuse(facts, agent_id, url, exc.message)
        if isinstance(exc, OUTAGE_ERRORS):
            return self._outage(exc, "verify a payment")
        self.stats.unavailable += 1
        if isinstance(exc, errors.NotLoggedIn):
            log.error("paid request refused: this gateway is not logged in (run /svc_login)")
            return error_answer(
                503,
                "Service Unavailable",
                "This agent cannot take payments yet: its operator is not logged in to the "
                "payment service. Nothing was charged.",
            )
        if isinstance(exc, errors.AuthenticationError):
            log.error(
                "verify rejected this gateway's API key (%s): the operator must /svc_login again",
                exc.code,
            )
            detail = "the payment service rejected the agent operator's API key"
        else:
            log.error("verify failed (%s): %s", exc.code, exc.message)
            detail = f"the payment service refused the verification ({exc.code})"
        return error_answer(
            502,
            "Bad Gateway",
            f"This agent cannot verify payments right now: {detail}. Nothing was charged; "
            "the agent's operator has been told.",
        )


def default_queue_path(core: PluginCore) -> Path:
    """``settleQueuePath``, else ``settle-queue.json`` beside the credential file."""
    configured = core.config.settle_queue_path
    if configured:
        return Path(configured).expanduser()
    return core.store.path.parent / QUEUE_FILE
