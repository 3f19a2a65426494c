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
operator's problem, not the payer's: they answer 503/502, never 402.

Every way to sell enters through :meth:`PaidFlow.handle` (a
:class:`~svc_gateway.selling.types.PaidRequest` in, a
:class:`~svc_gateway.selling.types.PaidOutcome` out): the paid endpoint (its agent:
:mod:`..ways_in.agent`), the middleware's routes, MCP tool calls, metered host tools. The flow
holds its parts, none of which imports it: the admission (:mod:`.admission`, up to a verified
call), the work (:mod:`.work`), the settler and the owed settles (:mod:`.settling`), the
refusals (:mod:`.refusals`) and the replay cache (:mod:`.replay`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any, TypeVar

from ...encoding import b64_json, to_int
from ...redact import get_logger
from ...runtime import PluginRuntime
from ...service import errors
from ...service.seller import Seller
from ..handlers import Answer, SyncHandlerPool
from ..state.book import CreditBook
from ..state.idempotency import MemoryIdempotency
from ..state.protocols import AdmissionBook, IdempotencyStore, SettleStore
from ..state.shared import StateUnavailable, claim_ttl_secs
from ..state.stats import PaidStats
from ..types import Outcome, PaidOutcome, PaidRequest
from .admission import Admitter
from .calls import PaidCall, Settled, SettleOutcome
from .idempotency import Retries
from .plans import PlanFacts, PlanFactsCache
from .refusals import Refusals
from .replay import ReplayCache
from .settling import Settler
from .tracing import NullTrace, abbreviate, start_trace
from .work import Worker

#: pauses between settle attempts (so 3 attempts); settle is idempotent on agentRequestId
SETTLE_BACKOFF_SECS: tuple[float, ...] = (0.2, 0.5)
#: paid requests handled at once; more get 503 so pending work (and memory) stays bounded
MAX_IN_FLIGHT = 256
#: how often the settle queue is retried while it holds entries
QUEUE_RETRY_SECS = 30.0
T = TypeVar("T")
log = get_logger("svc_gateway.paid")
#: outcomes that mark the request span failed (a settle failure marks only its own span)
_FAILED = frozenset({Outcome.REFUSED, Outcome.UNAVAILABLE, Outcome.WORK_FAILED})


class PaidFlow:
    """Verify → admit → work → settle for one seller; plan and agent ids are read per
    request from the seller's settings. Holds its parts: :attr:`admitter`, :attr:`worker`,
    :attr:`settler`, :attr:`refusals`, :attr:`replays`, and the :attr:`book` and
    :attr:`stats` they share. ``runtime``: the loop the flow runs on when a host's app must
    hop to it (the chat plugin's); ``None``: the caller's own loop."""

    def __init__(
        self,
        seller: Seller,
        *,
        handler_pool: SyncHandlerPool | None = None,
        plan_id: str | None = None,
        agent_id: str | None = None,
        facts: PlanFactsCache | None = None,
        settle_backoff: tuple[float, ...] = SETTLE_BACKOFF_SECS,
        max_in_flight: int = MAX_IN_FLIGHT,
        queue: SettleStore | None = None,
        book: AdmissionBook | None = None,
        queue_retry_secs: float = QUEUE_RETRY_SECS,
        runtime: PluginRuntime | None = None,
        idempotency: IdempotencyStore | None = None,
    ) -> None:
        self.seller = seller
        self.runtime = runtime
        self.explicit_plan_id = plan_id
        self.explicit_agent_id = agent_id
        self.facts_cache = facts or PlanFactsCache()
        self.max_in_flight = max_in_flight
        #: the sync handler threads of the work it sells (the endpoint agent's): when all are
        #: stuck, requests are refused before verify
        self.handler_pool = handler_pool if handler_pool is not None else SyncHandlerPool()
        self.replays = ReplayCache()
        self._in_flight = 0
        #: the counters every part adds to (one object for the flow's life)
        self.stats = PaidStats()
        #: the admission book the admitter claims in and the settler closes claims in
        self.book: AdmissionBook = book if book is not None else CreditBook(self._read_balance)
        self.refusals = Refusals(self.stats, self.handler_pool)
        self.settler = Settler(
            seller,
            self.stats,
            self.book,
            queue=queue,
            backoff=settle_backoff,
            queue_retry_secs=queue_retry_secs,
        )
        self.worker = Worker(seller, self.stats, self.refusals)
        self.admitter = Admitter(
            seller,
            facts=lambda plan_id: self.facts(plan_id),  # late-bound: tests swap it
            book=self.book,
            replays=self.replays,
            stats=self.stats,
            refusals=self.refusals,
        )
        settings = seller.settings
        if idempotency is None:
            idempotency = MemoryIdempotency(
                ttl=settings.idempotency_ttl_secs,
                lease=claim_ttl_secs(settings),
                max_entries=settings.idempotency_max_entries,
            )
        #: the answers bought under idempotency keys, replayed to their retries
        self.retries = Retries(
            idempotency,
            self.stats,
            max_answer_bytes=lambda: self.seller.settings.idempotency_max_answer_bytes,
            verify_payer=self._verify_payer,
        )

    async def on_its_loop(self, work: Coroutine[Any, Any, T]) -> T:
        """``work`` run on the loop the flow runs on (its runtime's; without one, here)."""
        if self.runtime is None:
            return await work
        return await self.runtime.run(work)

    # -- which plan and agent ------------------------------------------------------------------

    def plan_id(self) -> str | None:
        """Precedence: explicit argument > the seller's (the account's ``plan_id``, which
        svc_registerAgent updates, > config ``planId`` > the first of config ``plans``)."""
        return self.explicit_plan_id or self.seller.settings.plan_id

    def agent_id(self) -> str | None:
        return self.explicit_agent_id or self.seller.settings.agent_id

    async def facts(self, plan_id: str) -> PlanFacts:
        """The plan's scheme/network/bounds (cached 5 min); raises on a service outage."""
        cached = self.facts_cache.peek(plan_id)
        if cached is not None:
            return cached
        fetch = self.seller.public_client().get_plan
        return await self.facts_cache.get(plan_id, fetch, self.seller.settings.environment)

    async def _read_balance(self, plan_id: str, payer: str) -> int:
        balance = await self.seller.public_client().get_plan_balance(plan_id, payer)
        return balance.balance

    # -- the state machine ---------------------------------------------------------------------

    async def handle(self, request: PaidRequest) -> PaidOutcome:
        """Sell one request: admit → verify → work → settle → receipt or withhold (inside the
        request's span when tracing is on)."""
        if self._in_flight >= self.max_in_flight:
            return self.refusals.busy()
        self._in_flight += 1
        self.stats.requests += 1
        trace = start_trace()
        try:
            with trace.request():
                if trace.enabled:
                    trace.set(route=request.route, http_verb=request.verb)
                    trace.set(token=abbreviate(request.token))
                outcome = await self._sell(request, trace)
                if trace.enabled:
                    trace.set(outcome=outcome.kind.value)
                    if outcome.kind in _FAILED:
                        trace.fail(outcome.reason or outcome.kind.value)
                return outcome
        finally:
            self._in_flight -= 1

    async def _sell(self, request: PaidRequest, trace: NullTrace) -> PaidOutcome:
        """received → admitted (within ``paidBudgetSecs``, over it 503) → the work, settled."""
        plan_id = request.plan_id or self.plan_id()
        if plan_id is None:
            return self.refusals.no_plan()
        if self.handler_pool.stuck:
            stuck = self.refusals.stuck()
            return PaidOutcome(Outcome.UNAVAILABLE, stuck, "handler threads stuck")
        if trace.enabled:
            trace.set(plan_id=plan_id)
        if self.retries.key_of(request) is None:
            return await self._admitted(plan_id, request, trace)
        try:
            held = await self.retries.begin(request)
        except StateUnavailable as exc:
            return self.refusals.state_outage(exc)
        except errors.ServiceError as exc:  # verifying a retry's other token: not the payer's
            return self.refusals.unavailable(exc, "verify a payment")
        except TimeoutError:  # the same (paidBudgetSecs)
            return self.refusals.unavailable(None, "verify a payment in time")
        if held is None or isinstance(held, PaidOutcome):
            return held or await self._admitted(plan_id, request, trace)
        outcome: PaidOutcome | None = None
        try:
            outcome = await self._admitted(plan_id, request, trace)
            return outcome
        finally:
            await asyncio.shield(self._keep(held, outcome))

    async def _keep(self, held: tuple[str, str, str], outcome: PaidOutcome | None) -> None:
        """What a keyed request bought, kept for its retries (or its key freed)."""
        try:
            await self.retries.end(held, outcome)
        except StateUnavailable as exc:
            log.warning("could not keep a paid answer for its idempotency key (%s)", exc)

    async def _verify_payer(self, token: str, request: PaidRequest) -> str | None:
        """Who ``token`` pays as for ``request`` (verified, nothing claimed)."""
        plan_id = request.plan_id or self.plan_id()
        assert plan_id is not None  # a request without a plan is refused before its key
        agent_id = self.agent_id() if request.agent_id is None else request.agent_id or None
        async with asyncio.timeout(self.seller.settings.paid_budget_secs):
            return await self.admitter.verified_payer(
                plan_id, agent_id, token, request.url, description=request.description
            )

    async def _admitted(self, plan_id: str, request: PaidRequest, trace: NullTrace) -> PaidOutcome:
        """Admitted (within ``paidBudgetSecs``, over it 503), then the work, settled."""
        agent_id = self.agent_id() if request.agent_id is None else request.agent_id or None
        try:
            async with asyncio.timeout(self.seller.settings.paid_budget_secs) as budget:
                admitted = await self.admitter.admit(plan_id, agent_id, request, trace)
        except TimeoutError:
            if not budget.expired():
                raise
            return self.refusals.unavailable(None, "verify a payment in time")
        if isinstance(admitted, PaidOutcome):
            return admitted
        return await self._work(admitted, request, trace)

    async def _work(self, call: PaidCall, request: PaidRequest, trace: NullTrace) -> PaidOutcome:
        """verified → work done / work failed → settled / unsettled. The admission is closed on
        every path: by the settle's outcome once settling starts, else released here (also when
        the request is cancelled: a client gone, a host that cancels its handlers)."""
        settling = False
        try:
            answer = await self.worker.run(request, call.payer)
            if not answer.ok:
                return PaidOutcome(Outcome.WORK_FAILED, answer, f"status {answer.status}")
            if request.connected is not None and not request.connected():
                gone = self.worker.abandoned(call)
                return PaidOutcome(Outcome.WORK_FAILED, gone, "client disconnected")
            if request.settle_credits is not None:
                priced = await self.worker.price_answer(call, request.settle_credits, answer)
                if isinstance(priced, PaidOutcome):
                    return priced
                call = priced
            settling = True
            outcome = await self._settle(call, request, trace)
        finally:
            if not settling:
                await asyncio.shield(self.settler.release(call))
        if outcome.kind is Settled.PAID:
            assert outcome.receipt is not None
            receipt_header = ("payment-response", b64_json(outcome.receipt))
            headers = (*answer.headers, receipt_header)
            paid = Answer(answer.status, answer.body, answer.content_type, headers)
            if request.body_digest is not None:
                self.replays.remember(call.token, request.route, request.body_digest, paid)
            return PaidOutcome(
                Outcome.PAID,
                paid,
                receipt=outcome.receipt,
                result=answer,
                settle="paid",
                request_id=call.request_id,
            )
        if outcome.kind is Settled.REFUSED:
            return replace(self.refusals.refuse_settle(call, outcome.reason), settle="refused")
        if not request.deliver_unsettled:  # not settled now: withheld, nothing queued
            return replace(self.refusals.refuse_settle(call, outcome.reason), settle="withheld")
        return PaidOutcome(
            Outcome.DEFERRED,
            answer,
            outcome.reason,
            result=answer,
            settle=outcome.kind.value,
            request_id=call.request_id,
        )

    async def _settle(
        self, call: PaidCall, request: PaidRequest, trace: NullTrace
    ) -> SettleOutcome:
        """The settle inside its span, with the receipt's figures or the failure on it."""
        with trace.settlement():
            outcome = await self.settler.settle(call, request.deliver_unsettled)
            if trace.enabled:
                if outcome.kind is Settled.PAID:
                    assert outcome.receipt is not None
                    trace.set(
                        credits_redeemed=to_int(outcome.receipt["creditsRedeemed"]),
                        balance_after=to_int(outcome.receipt["remainingBalance"]),
                        transaction=str(outcome.receipt["transaction"]),
                    )
                else:
                    trace.fail(outcome.reason or outcome.kind.value, parent=False)
        return outcome

    async def verified_payer(
        self, token: str, url: str, *, description: str | None = None
    ) -> str | None:
        """Who ``token`` pays as, once the service verified it (for this flow's plan and agent,
        on ``url``), without selling anything: a way in that must know the payer before it
        reads what the payer may see (A2A's tasks). ``None``: no plan, or the token does not
        verify. Raises on an outage, or when the budget (``paidBudgetSecs``) runs out."""
        plan_id = self.plan_id()
        if plan_id is None:
            return None
        async with asyncio.timeout(self.seller.settings.paid_budget_secs):
            return await self.admitter.verified_payer(
                plan_id, self.agent_id(), token, url, description=description
            )

    # -- shutting down ---------------------------------------------------------------------

    async def aclose(self) -> None:
        await self.settler.stop()
        self.handler_pool.shutdown()
        if self.settler.queue is not None:
            await self.settler.queue.aclose()
        await self.book.aclose()
        await self.retries.store.aclose()
