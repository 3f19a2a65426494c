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
:class:`~svc_gateway.selling.types.PaidOutcome` out): the paid endpoint (:meth:`PaidFlow.serve`),
the middleware's routes, MCP tool calls, metered host tools. The flow holds its parts, none of
which imports it: the admission (:mod:`.admission`, up to a verified call), the work
(:mod:`.work`), the settler and the owed settles (:mod:`.settling`), the refusals
(:mod:`.refusals`) and the replay cache (:mod:`.replay`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...account.core import PluginCore
from ...encoding import b64_json, to_int
from ...runtime import Loop
from ...service import errors
from ...service.models import PaymentRequirement
from ..handlers import (
    AgentHandler,
    Answer,
    CreditsFn,
    HandlerError,
    SyncHandlerPool,
    call_maybe_async,
    run_handler,
)
from ..state.book import CreditBook
from ..state.protocols import AdmissionBook, SettleStore
from ..state.stats import PaidStats
from ..types import Outcome, PaidOutcome, PaidRequest
from .admission import Admitter
from .calls import PaidCall, Settled, SettleOutcome
from .deadlines import Deadlines
from .plans import PlanFacts, PlanFactsCache
from .refusals import Refusals
from .replay import ReplayCache, digest
from .settling import QueuedListener, Settler
from .tracing import NullTrace, abbreviate, start_trace
from .work import Worker

#: pauses between settle attempts (so 3 attempts); settle is idempotent on agentRequestId
SETTLE_BACKOFF_SECS: tuple[float, ...] = (0.2, 0.5)
#: paid requests handled at once; more get 503 so pending work (and memory) stays bounded
MAX_IN_FLIGHT = 256
#: how often the settle queue is retried while it holds entries
QUEUE_RETRY_SECS = 30.0
#: the paid endpoint's route name (replay key)
ENDPOINT_ROUTE = "endpoint"
#: outcomes that mark the request span failed (a settle failure marks only its own span)
_FAILED = frozenset({Outcome.REFUSED, Outcome.UNAVAILABLE, Outcome.WORK_FAILED})


class PaidFlow:
    """Verify → admit → handler → settle for one endpoint; plan and agent ids are read per
    request. Holds its parts: :attr:`admitter`, :attr:`settler`, :attr:`worker`,
    :attr:`refusals`, :attr:`replays`."""

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
        self.max_in_flight = max_in_flight
        self.handler_pool = SyncHandlerPool()
        self.replays = ReplayCache()
        self._in_flight = 0
        self._stats = PaidStats()
        self._book: AdmissionBook = book if book is not None else CreditBook(self._read_balance)
        self.refusals = Refusals(self._stats, self.handler_pool)
        self.settler = Settler(
            core,
            self._stats,
            self._book,
            queue=queue,
            backoff=settle_backoff,
            queue_retry_secs=queue_retry_secs,
        )
        self.deadlines = Deadlines()
        self.worker = Worker(core, self._stats, self.refusals, self.deadlines)
        self.admitter = Admitter(
            core,
            # cached facts as they are (no coroutine), else the read (late-bound: tests swap it)
            facts=lambda plan_id: self.facts_cache.peek(plan_id) or self.facts(plan_id),
            book=self._book,
            replays=self.replays,
            stats=self._stats,
            refusals=self.refusals,
        )

    # -- the parts' state, read and set through the flow ------------------------------------

    @property
    def stats(self) -> PaidStats:
        """The counters every part adds to (one object for the flow's life)."""
        return self._stats

    @property
    def book(self) -> AdmissionBook:
        """The admission book the admitter claims in and the settler closes claims in."""
        return self._book

    @property
    def queue(self) -> SettleStore | None:
        """The settle store; ``None`` until :meth:`start` (or the first deferred settle) opens
        the default one, the journal beside the credentials (it takes a lock: blocking I/O)."""
        return self.settler.queue

    @queue.setter
    def queue(self, store: SettleStore | None) -> None:
        self.settler.queue = store

    @property
    def settle_backoff(self) -> tuple[float, ...]:
        """Pauses between settle attempts (settle is idempotent on ``agentRequestId``)."""
        return self.settler.backoff

    @settle_backoff.setter
    def settle_backoff(self, pauses: tuple[float, ...]) -> None:
        self.settler.backoff = pauses

    @property
    def queue_retry_secs(self) -> float:
        """How often the settle queue is retried while it holds entries."""
        return self.settler.queue_retry_secs

    @queue_retry_secs.setter
    def queue_retry_secs(self, secs: float) -> None:
        self.settler.queue_retry_secs = secs

    @property
    def queued_listeners(self) -> list[QueuedListener]:
        """Told how each queued settle ended: ``(agentRequestId, "settled" | "lost", receipt)``."""
        return self.settler.queued_listeners

    async def start(self) -> int:
        """Open the settle store and retry the settles a previous run left owed; how many."""
        return await self.settler.start()

    def kick_queue(self, delay: float = 0.0) -> None:
        """Retry the settle queue soon."""
        self.settler.kick_queue(delay)

    async def drain_queue(self) -> int:
        """Retry each queued settle once, oldest first; how many were settled."""
        return await self.settler.drain_queue()

    # -- the parts' helpers under their old names (tests reach for them) ----------------------

    async def _store(self) -> SettleStore:
        return await self.settler.store()

    @property
    def _envelopes(self) -> dict[tuple[Any, ...], PaymentRequirement]:
        return self.admitter.envelopes

    def _outage(self, exc: errors.ServiceError | None, doing: str) -> Answer:
        return self.refusals.outage(exc, doing)

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
        cached = self.facts_cache.peek(plan_id)
        if cached is not None:
            return cached
        fetch = self.core.public_client().get_plan
        return await self.facts_cache.get(plan_id, fetch, self.core.environment)

    async def _read_balance(self, plan_id: str, payer: str) -> int:
        balance = await self.core.public_client().get_plan_balance(plan_id, payer)
        return balance.balance

    # -- the state machine ---------------------------------------------------------------------

    def endpoint_request(
        self,
        prompt: str,
        token: str | None,
        url: str,
        connected: Callable[[], bool] | None = None,
    ) -> PaidRequest:
        """The paid endpoint's request to sell for one well-formed ``{"prompt"}`` body (the
        HTTP layer has checked method, size, JSON)."""
        return PaidRequest(
            token=token,
            url=url,
            work=functools.partial(run_handler, self.handler, prompt, self.handler_pool),
            # without a credits function the admission reads the config's price itself
            credits=None
            if self.credits is None
            else functools.partial(self.price_for, {"prompt": prompt}),
            route=ENDPOINT_ROUTE,
            body_digest=digest(prompt),
            connected=connected,
        )

    async def serve(
        self,
        prompt: str,
        token: str | None,
        url: str,
        connected: Callable[[], bool] | None = None,
    ) -> Answer:
        """The paid endpoint's entry: one well-formed ``{"prompt"}`` request, sold through
        :meth:`handle`. ``connected`` says whether the client is still there to receive the
        answer; asked just before settling (a client gone is never charged for an answer it
        cannot receive)."""
        return (await self.handle(self.endpoint_request(prompt, token, url, connected))).answer

    async def handle(
        self, request: PaidRequest, *, loop: Loop | None = None, _span: NullTrace | None = None
    ) -> PaidOutcome:
        """Sell one request: admit → verify → work → settle → receipt or withhold. ``loop``: the
        running loop where the way in has it (asking asyncio costs a ``getpid`` system call;
        the flow asks once a request). (With tracing on, :meth:`_traced` opens the request's
        span and sells it through here again, as ``_span``: no extra coroutine layer untraced.)"""
        loop = asyncio.get_running_loop() if loop is None else loop
        if _span is None:
            if self._in_flight >= self.max_in_flight:
                return self.refusals.busy()
            trace = start_trace()
            if trace.enabled:
                return await self._traced(request, trace, loop)
            self._in_flight += 1
            self._stats.requests += 1
        else:
            trace = _span
        try:
            plan_id = request.plan_id or self.plan_id()
            if plan_id is None:
                return self.refusals.no_plan()
            if self.handler_pool.stuck:
                stuck = self.refusals.stuck()
                return PaidOutcome(Outcome.UNAVAILABLE, stuck, "handler threads stuck")
            if trace.enabled:
                trace.set(plan_id=plan_id)
            budget = self.deadlines(self.core.config.paid_budget_secs, loop)
            try:
                with budget:
                    agent_id = (
                        self.agent_id() if request.agent_id is None else request.agent_id or None
                    )
                    admitted = await self.admitter.admit(plan_id, agent_id, request, trace, loop)
            except TimeoutError:
                if not budget.expired():
                    raise
                return self.refusals.unavailable(None, "verify a payment in time")
            if isinstance(admitted, PaidOutcome):
                return admitted
            return await self._work(admitted, request, trace, loop)
        finally:
            if _span is None:
                self._in_flight -= 1

    async def _traced(self, request: PaidRequest, trace: NullTrace, loop: Loop) -> PaidOutcome:
        """:meth:`handle` inside the request's span (tracing on)."""
        self._in_flight += 1
        self._stats.requests += 1
        try:
            with trace.request():
                trace.set(route=request.route, http_verb=request.verb)
                trace.set(token=abbreviate(request.token))
                outcome = await self.handle(request, loop=loop, _span=trace)
                trace.set(outcome=outcome.kind.value)
                if outcome.kind in _FAILED:
                    trace.fail(outcome.reason or outcome.kind.value)
                return outcome
        finally:
            self._in_flight -= 1

    async def _work(
        self, call: PaidCall, request: PaidRequest, trace: NullTrace, loop: Loop
    ) -> PaidOutcome:
        """verified → work done / work failed → settled / unsettled. The admission is closed on
        every path: by the settle's outcome once settling starts, else released here (also when
        the request is cancelled: a client gone, a host that cancels its handlers)."""
        settling = False
        try:
            answer = await self.worker.run(request, call.payer, loop)
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
            if trace.enabled:
                outcome = await self._settle_traced(call, request, trace, loop)
            else:  # no span to open: no context manager entered
                outcome = await self.settler.settle(call, request.deliver_unsettled, loop)
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

    async def _settle_traced(
        self, call: PaidCall, request: PaidRequest, trace: NullTrace, loop: Loop
    ) -> SettleOutcome:
        """The settle inside its span, with the receipt's figures or the failure on it."""
        with trace.settlement():
            outcome = await self.settler.settle(call, request.deliver_unsettled, loop)
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
        async with asyncio.timeout(self.core.config.paid_budget_secs):
            return await self.admitter.verified_payer(
                plan_id, self.agent_id(), token, url, description=description
            )

    async def price_for(self, request: dict[str, Any]) -> int:
        """The credits one request costs: the host's credits function (``credits_for_request``,
        given ``{"prompt": ...}``), else config ``creditsPerRequest``."""
        if self.credits is None:
            return self.core.config.credits_per_request
        value = await call_maybe_async(self.credits, request)
        if isinstance(value, bool) or not isinstance(value, int):
            raise HandlerError("the credits function must return an int")
        return value

    # -- shutting down ---------------------------------------------------------------------

    async def aclose(self) -> None:
        await self.settler.stop()
        self.handler_pool.shutdown()
        if self.queue is not None:
            await self.queue.aclose()
        await self.book.aclose()
