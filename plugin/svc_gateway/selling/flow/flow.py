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

Every way to sell enters through :meth:`PaidFlow.handle` (a :class:`~.outcome.PaidRequest` in,
a :class:`~.outcome.PaidOutcome` out): the paid endpoint (:meth:`PaidFlow.serve`), the
middleware's routes (:mod:`.middleware`), MCP tool calls. Settling and the owed settles live in
:mod:`.settling`, the refusals in :mod:`.refusals`; both are parts of :class:`PaidFlow`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ...chat.core import PluginCore
from ...encoding import b64_json, decode_access_token, decode_b64_json, to_int, token_authorization
from ...redact import get_logger
from ...service import errors
from ...service.models import PaymentRequirement, VerifyResult
from ..handlers import (
    HANDLER_PAYER,
    AgentHandler,
    Answer,
    CreditsFn,
    HandlerError,
    SyncHandlerPool,
    call_maybe_async,
    run_handler,
)
from ..state.book import Admission, CreditBook, Refusal
from ..state.protocols import AdmissionBook, SettleStore
from ..state.shared import StateUnavailable
from ..types import Outcome, PaidOutcome, PaidRequest
from .plans import OUTAGE_ERRORS, PlanFacts, PlanFactsCache, build_envelope
from .refusals import GUIDANCE, RETRY_AFTER_SECS, RefusalMixin, error_answer
from .replay import Paid, ReplayCache, digest
from .settling import (
    REPLAYED_TOKEN,
    PaidCall,
    Settled,
    SettleMixin,
    SettleOutcome,
    classify_settle_error,
    default_queue_path,
)
from .tracing import NullTrace, abbreviate, start_trace

#: names other modules import from here (they moved to .settling and .refusals)
__all__ = [
    "GUIDANCE",
    "MAX_TOKEN_CHARS",
    "REPLAYED_TOKEN",
    "RETRY_AFTER_SECS",
    "PaidCall",
    "PaidFlow",
    "PaidStats",
    "SettleOutcome",
    "Settled",
    "classify_settle_error",
    "default_queue_path",
    "error_answer",
    "token_payer",
    "verified_balance",
]

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
#: how often the settle queue is retried while it holds entries
QUEUE_RETRY_SECS = 30.0
#: the paid endpoint's route name (replay key)
ENDPOINT_ROUTE = "endpoint"
#: outcomes that mark the request span failed (a settle failure marks only its own span)
_FAILED = frozenset({Outcome.REFUSED, Outcome.UNAVAILABLE, Outcome.WORK_FAILED})


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
    replayed: int = 0
    receipts: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECEIPTS_KEPT))


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


class PaidFlow(SettleMixin, RefusalMixin):
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
        self.queued_listeners = []
        self.handler_pool = SyncHandlerPool()
        self._in_flight = 0
        self._envelopes: dict[tuple[Any, ...], PaymentRequirement] = {}
        self.replays = ReplayCache()
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
        """The paid endpoint's entry: one well-formed ``{"prompt"}`` request (the HTTP layer
        has checked method, size, JSON), sold through :meth:`handle`. ``connected`` says whether
        the client is still there to receive the answer; asked just before settling (a client
        gone is never charged for an answer it cannot receive)."""
        request = PaidRequest(
            token=token,
            url=url,
            work=functools.partial(run_handler, self.handler, prompt, self.handler_pool),
            credits=functools.partial(self._price, {"prompt": prompt}),
            route=ENDPOINT_ROUTE,
            body_digest=digest(prompt),
            connected=connected,
        )
        return (await self.handle(request)).answer

    async def handle(self, request: PaidRequest) -> PaidOutcome:
        """Sell one request: admit → verify → work → settle → receipt or withhold."""
        if self._in_flight >= self.max_in_flight:
            self.stats.unavailable += 1
            answer = error_answer(
                503,
                "Service Unavailable",
                "The agent is busy; nothing was charged. Retry in a second.",
                **{"Retry-After": "1"},
            )
            return PaidOutcome(Outcome.UNAVAILABLE, answer, "busy")
        self._in_flight += 1
        self.stats.requests += 1
        trace = start_trace()
        try:
            with trace.request():
                trace.set(route=request.route, http_verb=request.verb)
                trace.set(token=abbreviate(request.token))
                outcome = await self._handle(request, trace)
                trace.set(outcome=outcome.kind.value)
                if outcome.kind in _FAILED:
                    trace.fail(outcome.reason or outcome.kind.value)
                return outcome
        finally:
            self._in_flight -= 1

    async def _handle(self, request: PaidRequest, trace: NullTrace) -> PaidOutcome:
        plan_id = request.plan_id or self.plan_id()
        if plan_id is None:
            self.stats.unavailable += 1
            answer = error_answer(
                503,
                "Service Unavailable",
                "This agent is not selling yet: no plan is configured (its operator sets planId "
                "or registers one with svc_registerAgent). Nothing was charged.",
            )
            return PaidOutcome(Outcome.UNAVAILABLE, answer, "no plan")
        if self.handler_pool.stuck:
            return PaidOutcome(Outcome.UNAVAILABLE, self._stuck(), "handler threads stuck")
        trace.set(plan_id=plan_id)
        budget = asyncio.timeout(self.core.config.paid_budget_secs)
        try:
            async with budget:
                admitted = await self._admit(plan_id, request, trace)
        except TimeoutError:
            if not budget.expired():
                raise
            return self._unavailable(None, "verify a payment in time")
        if isinstance(admitted, PaidOutcome):
            return admitted
        return await self._work(admitted, request, trace)

    async def _admit(
        self, plan_id: str, request: PaidRequest, trace: NullTrace
    ) -> PaidOutcome | PaidCall:
        """received → 402 / 503 / 502, or a verified call whose credits are claimed."""
        agent_id = self.agent_id() if request.agent_id is None else request.agent_id or None
        try:
            facts = self._override(await self.facts(plan_id), request)
        except OUTAGE_ERRORS as exc:
            return self._unavailable(exc, "read the plan")
        trace.set(scheme=facts.scheme, network=facts.network)
        token = request.token
        if not token:
            return self._refuse(facts, agent_id, request, "No payment-signature header was sent")
        if len(token) > MAX_TOKEN_CHARS or not TOKEN_RE.fullmatch(token):
            return self._refuse(
                facts, agent_id, request, "The payment-signature is not a valid token"
            )
        if request.body_digest is not None:
            paid = self.replays.lookup(token, request.route)
            if paid is not None and paid.body == request.body_digest:
                return self._replay(paid)
        try:
            amount = facts.clamp(await self._request_price(request))
        except Exception as exc:
            log.error("the credits function failed (%s); request refused", type(exc).__name__)
            answer = error_answer(
                500, "Internal Server Error", "The agent could not price this request."
            )
            return PaidOutcome(Outcome.WORK_FAILED, answer, "the credits function failed")
        envelope = self._envelope(
            facts,
            agent_id,
            request.url,
            verb=request.verb,
            description=request.description,
            mime_type=request.mime_type,
        )
        with trace.verify():
            trace.set(credits_requested=amount)
            try:
                client = self.core.client()
                verdict = await client.verify(envelope, token, amount)
            except errors.ServiceError as exc:
                trace.fail(exc.code)
                return self._verify_failed(exc, facts, agent_id, request)
            if not verdict.is_valid:
                reason = verdict.invalid_reason or "The access token was not accepted"
                trace.fail(reason)
                log.info("payment refused on plan %s: %s", plan_id, reason)
                return self._refuse(facts, agent_id, request, reason)
            payer = verdict.payer or token_payer(token)
            trace.set(payer=payer)
        admission: Admission | None = None
        if payer and not facts.is_time:  # access to a time plan is not metered per request
            try:
                claim = await self.book.admit(plan_id, payer, amount, verified_balance(verdict))
            except StateUnavailable as exc:
                return self._state_outage(exc)
            except OUTAGE_ERRORS as exc:
                return self._unavailable(exc, "read the payer's balance")
            except errors.ServiceError as exc:
                # verify accepted the token; settle will still refuse a payer who cannot pay
                log.warning("could not read payer %s's balance (%s); not metered", payer, exc.code)
                claim = None
            if isinstance(claim, Refusal):
                return self._refuse(facts, agent_id, request, claim.reason)
            admission = claim
        return PaidCall(envelope, token, amount, verdict.request_id, payer, admission)

    async def _work(self, call: PaidCall, request: PaidRequest, trace: NullTrace) -> PaidOutcome:
        """verified → work done / work failed → settled / unsettled. The admission is closed on
        every path: by the settle's outcome once settling starts, else released here (also when
        the request is cancelled: a client gone, a host that cancels its handlers)."""
        settling = False
        try:
            held = HANDLER_PAYER.set(call.payer)  # a sync handler's threads: a fair share each
            try:
                answer = await self._run_work(request)
            finally:
                HANDLER_PAYER.reset(held)
            if not answer.ok:
                return PaidOutcome(Outcome.WORK_FAILED, answer, f"status {answer.status}")
            if request.connected is not None and not request.connected():
                gone = self._abandoned(call)
                return PaidOutcome(Outcome.WORK_FAILED, gone, "client disconnected")
            if request.settle_credits is not None:
                priced = await self._price_answer(call, request.settle_credits, answer)
                if isinstance(priced, PaidOutcome):
                    return priced
                call = priced
            settling = True
            with trace.settlement():
                outcome = await self._settle(call, queue=request.deliver_unsettled)
                if outcome.kind is Settled.PAID:
                    assert outcome.receipt is not None
                    trace.set(
                        credits_redeemed=to_int(outcome.receipt["creditsRedeemed"]),
                        balance_after=to_int(outcome.receipt["remainingBalance"]),
                        transaction=str(outcome.receipt["transaction"]),
                    )
                else:
                    trace.fail(outcome.reason or outcome.kind.value, parent=False)
        finally:
            if not settling:
                await asyncio.shield(self._release(call))
        if outcome.kind is Settled.PAID:
            assert outcome.receipt is not None
            receipt_header = ("payment-response", b64_json(outcome.receipt))
            paid = replace(answer, headers=(*answer.headers, receipt_header))
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
            return replace(self._refuse_settle(call, outcome.reason), settle="refused")
        if not request.deliver_unsettled:  # not settled now: withheld, nothing queued
            return replace(self._refuse_settle(call, outcome.reason), settle="withheld")
        return PaidOutcome(
            Outcome.DEFERRED,
            answer,
            outcome.reason,
            result=answer,
            settle=outcome.kind.value,
            request_id=call.request_id,
        )

    async def _price_answer(
        self, call: PaidCall, price: Callable[[Answer], Awaitable[int]], answer: Answer
    ) -> PaidCall | PaidOutcome:
        """``PaidRequest.settle_credits``: the amount to settle, priced from the answer (the
        verified ``credits`` were the ceiling claimed); 0 settles nothing. The caller releases
        the admission when this returns an outcome."""
        try:
            amount = await price(answer)
        except Exception as exc:
            self.stats.handler_failures += 1
            log.error("the credits function failed (%s); not charged", type(exc).__name__)
            failed = error_answer(
                500, "Internal Server Error", "The agent could not price this request."
            )
            return PaidOutcome(Outcome.WORK_FAILED, failed, "the credits function failed")
        if amount <= 0:
            return PaidOutcome(Outcome.PAID, answer, "free", result=answer)
        return replace(call, amount=amount)

    async def _run_work(self, request: PaidRequest) -> Answer:
        """The work's answer within ``handlerTimeoutSecs``, or the error answer (not charged)
        its failure gets. A cancellation from outside (the request is gone) propagates."""
        deadline = asyncio.timeout(self.core.config.handler_timeout_secs)
        try:
            async with deadline:
                answer = await request.work()
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

    def _replay(self, paid: Paid) -> PaidOutcome:
        """A retry of the request this single-use token already paid for: the same answer,
        uncharged. (Another body under the same token takes the normal path, where the
        service refuses the spent token at settle: withheld, 402.)"""
        self.stats.replayed += 1
        log.info("replayed the answer a settled single-use token paid for (a retry)")
        receipt = dict(paid.answer.headers).get("payment-response")
        return PaidOutcome(
            Outcome.PAID,
            paid.answer,
            "replayed",
            receipt=decode_b64_json(receipt) if receipt else None,
            result=paid.answer,
            replayed=True,
        )

    @staticmethod
    def _override(facts: PlanFacts, request: PaidRequest) -> PlanFacts:
        if request.scheme is None and request.network is None:
            return facts
        return replace(
            facts,
            scheme=request.scheme or facts.scheme,
            network=request.network or facts.network,
        )

    async def _request_price(self, request: PaidRequest) -> int:
        credits = request.credits
        if credits is None:
            return self.core.config.credits_per_request
        if isinstance(credits, int):
            return credits
        return await credits()

    def _envelope(
        self,
        facts: PlanFacts,
        agent_id: str | None,
        url: str,
        *,
        verb: str = "POST",
        description: str | None = None,
        mime_type: str | None = None,
    ) -> PaymentRequirement:
        """The request's envelope, built once per (plan facts, agent, URL, verb, resource
        description) and then shared (never mutated: a refusal copies it)."""
        key = (facts, agent_id, url, verb, description, mime_type)
        envelope = self._envelopes.get(key)
        if envelope is None:
            if len(self._envelopes) >= ENVELOPES_KEPT:
                self._envelopes.clear()
            envelope = self._envelopes[key] = build_envelope(
                facts, agent_id, url, verb=verb, description=description, mime_type=mime_type
            )
        return envelope

    async def _price(self, request: dict[str, Any]) -> int:
        if self.credits is None:
            return self.core.config.credits_per_request
        value = await call_maybe_async(self.credits, request)
        if isinstance(value, bool) or not isinstance(value, int):
            raise HandlerError("the credits function must return an int")
        return value

    # -- shutting down ---------------------------------------------------------------------

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
