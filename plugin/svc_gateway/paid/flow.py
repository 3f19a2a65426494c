"""One paid request, as the state table of SPEC.md ("States and transitions") draws it.

received → (no token | verify invalid) → 402 with the envelope · (verify valid) → verified →
handler non-2xx or exception → no settle, no charge · handler 2xx → settle (retried on its
``agentRequestId``, which makes it idempotent) → receipt in ``payment-response``, or, when
settling keeps failing, the 2xx unchanged and an error in the log.

Reasons the service itself cannot answer (network, 5xx, 429, our own key rejected) are the
operator's problem, not the payer's: they answer 503/502, never 402. Runs on the plugin loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from .. import errors
from ..client import ServiceClient
from ..core import PluginCore
from ..encoding import b64_json, to_int
from ..models import PaymentRequirement
from ..redact import get_logger
from .handlers import AgentHandler, Answer, CreditsFn, HandlerError, call_maybe_async, run_handler
from .plans import OUTAGE_ERRORS, PlanFacts, PlanFactsCache, build_envelope

log = get_logger("svc_gateway.paid")

#: a longer ``payment-signature`` is no token we issued; refused without asking the service
MAX_TOKEN_CHARS = 16384
#: pauses between settle attempts (so 3 attempts); settle is idempotent on agentRequestId
SETTLE_BACKOFF_SECS: tuple[float, ...] = (0.2, 0.5)
#: paid requests handled at once; more get 503 so pending work (and memory) stays bounded
MAX_IN_FLIGHT = 256
RECEIPTS_KEPT = 100
RETRY_AFTER_SECS = 5

GUIDANCE = (
    "Order the plan (svc_orderPlan, or svc_orderFiatPlan for a card plan), get an access token "
    "for it (svc_getAccessToken), and send the token in the payment-signature header."
)
# settle answers that will not change on a retry
_DEFINITIVE = (
    errors.AuthenticationError,
    errors.PermissionDenied,
    errors.NotFound,
    errors.InvalidRequest,
    errors.NotLoggedIn,
)


@dataclass
class PaidStats:
    """Counters the builder can read (the demo checks its receipts against the subscriber's)."""

    requests: int = 0
    refused: int = 0
    unavailable: int = 0
    handler_failures: int = 0
    settled: int = 0
    credits_settled: int = 0
    settle_failures: int = 0
    receipts: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECEIPTS_KEPT))


def error_answer(status: int, error: str, message: str, **headers: str) -> Answer:
    return Answer.json(status, {"error": error, "message": message}, headers)


class PaidFlow:
    """Verify → handler → settle for one endpoint; plan and agent ids are read per request."""

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
    ) -> None:
        self.core = core
        self.handler = handler
        self.credits = credits
        self.explicit_plan_id = plan_id
        self.explicit_agent_id = agent_id
        self.facts_cache = facts or PlanFactsCache()
        self.settle_backoff = settle_backoff
        self.max_in_flight = max_in_flight
        self.stats = PaidStats()
        self._in_flight = 0

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

    # -- the state machine ---------------------------------------------------------------------

    async def serve(self, prompt: str, token: str | None, url: str) -> Answer:
        """Answer one well-formed request (the HTTP layer has checked method, size, JSON)."""
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
            return await self._serve(prompt, token, url)
        finally:
            self._in_flight -= 1

    async def _serve(self, prompt: str, token: str | None, url: str) -> Answer:
        plan_id = self.plan_id()
        if plan_id is None:
            self.stats.unavailable += 1
            return error_answer(
                503,
                "Service Unavailable",
                "This agent is not selling yet: no plan is configured (its operator sets planId "
                "or registers one with svc_registerAgent). Nothing was charged.",
            )
        agent_id = self.agent_id()
        try:
            facts = await self.facts(plan_id)
        except OUTAGE_ERRORS as exc:
            return self._outage(exc, "read the plan")
        if not token:
            return self._refuse(facts, agent_id, url, "No payment-signature header was sent")
        if len(token) > MAX_TOKEN_CHARS:
            return self._refuse(facts, agent_id, url, "The payment-signature is not a valid token")
        try:
            amount = facts.clamp(await self._price({"prompt": prompt}))
        except Exception as exc:
            log.error("the credits function failed (%s); request refused", type(exc).__name__)
            return error_answer(
                500, "Internal Server Error", "The agent could not price this request."
            )
        envelope = build_envelope(facts, agent_id, url)
        try:
            client = self.core.client()
            verdict = await client.verify(envelope, token, amount)
        except errors.ServiceError as exc:
            return self._verify_failed(exc, facts, agent_id, url)
        if not verdict.is_valid:
            reason = verdict.invalid_reason or "The access token was not accepted"
            log.info("payment refused on plan %s: %s", plan_id, reason)
            return self._refuse(facts, agent_id, url, reason)
        return await self._work(client, envelope, token, amount, verdict.request_id, prompt)

    async def _work(
        self,
        client: ServiceClient,
        envelope: PaymentRequirement,
        token: str,
        amount: int,
        request_id: str | None,
        prompt: str,
    ) -> Answer:
        """verified → work done / work failed → settled / unsettled."""
        try:
            answer = await run_handler(self.handler, prompt)
        except Exception as exc:
            self.stats.handler_failures += 1
            if isinstance(exc, HandlerError):
                log.error("agent handler answer unusable: %s; not charged", exc)
            else:
                log.exception("agent handler raised %s; not charged", type(exc).__name__)
            return error_answer(
                500, "Internal Server Error", "The agent failed to answer; nothing was charged."
            )
        if not answer.ok:
            self.stats.handler_failures += 1
            log.info("agent handler answered %s; not settled, not charged", answer.status)
            return answer
        receipt = await self._settle(client, envelope, token, amount, request_id)
        if receipt is None:
            return answer
        return replace(answer, headers=(*answer.headers, ("payment-response", b64_json(receipt))))

    async def _price(self, request: dict[str, Any]) -> int:
        if self.credits is None:
            return self.core.config.credits_per_request
        value = await call_maybe_async(self.credits, request)
        if isinstance(value, bool) or not isinstance(value, int):
            raise HandlerError("the credits function must return an int")
        return value

    async def _settle(
        self,
        client: ServiceClient,
        envelope: PaymentRequirement,
        token: str,
        amount: int,
        request_id: str | None,
    ) -> dict[str, Any] | None:
        """Settle, retrying on the same ``agentRequestId``; ``None`` when it never succeeded.

        Without an id a replay could burn twice, so then there is exactly one attempt."""
        attempts = len(self.settle_backoff) + 1 if request_id else 1
        reason = "not attempted"
        attempt = 0
        for attempt in range(1, attempts + 1):
            try:
                result = await client.settle(envelope, token, amount, request_id)
            except _DEFINITIVE as exc:
                reason = f"{exc.code}: {exc.message}"
                break
            except errors.ServiceError as exc:
                reason = f"{exc.code}: {exc.message}"
            except Exception as exc:  # a closed client, a bug: still never the client's problem
                reason = type(exc).__name__
            else:
                if result.success:
                    receipt = result.receipt()
                    self.stats.settled += 1
                    self.stats.credits_settled += to_int(receipt["creditsRedeemed"])
                    self.stats.receipts.append(receipt)
                    return receipt
                reason = result.error_reason or "the service answered success: false"
            if attempt < attempts:
                await asyncio.sleep(self.settle_backoff[attempt - 1])
        self.stats.settle_failures += 1
        log.error(
            "settle failed for agentRequestId %s (plan %s) after %d attempt(s): %s; "
            "the answer was delivered without payment",
            request_id,
            envelope.accepts[0].plan_id if envelope.accepts else "?",
            attempt,
            reason,
        )
        return None

    # -- refusals ------------------------------------------------------------------------------

    def _refuse(self, facts: PlanFacts, agent_id: str | None, url: str, reason: str) -> Answer:
        self.stats.refused += 1
        envelope = build_envelope(facts, agent_id, url, error=reason)
        body = {"error": "Payment Required", "message": f"{reason}. {GUIDANCE}", "reason": reason}
        return Answer.json(402, body, {"payment-required": b64_json(envelope.wire())})

    def _outage(self, exc: errors.ServiceError, doing: str) -> Answer:
        self.stats.unavailable += 1
        log.warning("could not %s: the payment service is unavailable (%s)", doing, exc.code)
        retry = getattr(exc, "retry_after", None)
        seconds = str(round(retry)) if isinstance(retry, int | float) else str(RETRY_AFTER_SECS)
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
