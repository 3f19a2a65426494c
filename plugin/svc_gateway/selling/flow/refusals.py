"""How the flow says no: 402 with the envelope, 503 / 502 when the service or this seller
cannot take the payment, and the plain JSON error body every refusal uses.

:class:`Refusals` is a part the flow holds (it counts in the flow's :class:`PaidStats`).
Reasons the service itself cannot answer (network, 5xx, 429, our own key rejected) are the
operator's problem, not the payer's: they answer 503/502, never 402.
"""

from __future__ import annotations

from dataclasses import replace

from ...encoding import b64_json
from ...redact import get_logger
from ...service import errors
from ...service.models import PaymentRequirement
from ..handlers import Answer, SyncHandlerPool
from ..state.idempotency import advertised
from ..state.shared import StateUnavailable
from ..state.stats import PaidStats
from ..types import Outcome, PaidOutcome
from .calls import PaidCall
from .plans import OUTAGE_ERRORS

log = get_logger("svc_gateway.paid")

RETRY_AFTER_SECS = 5
GUIDANCE = (
    "Order the plan (svc_orderPlan, or svc_orderFiatPlan for a card plan), get an access token "
    "for it (svc_getAccessToken), and send the token in the payment-signature header."
)


def error_answer(status: int, error: str, message: str, **headers: str) -> Answer:
    return Answer.json(status, {"error": error, "message": message}, headers)


def retry_later(why: str, seconds: str = str(RETRY_AFTER_SECS)) -> Answer:
    """503 for a refusal before anything was charged: ``why``, then when to retry."""
    return error_answer(
        503,
        "Service Unavailable",
        f"{why}; nothing was charged. Retry in {seconds} s.",
        **{"Retry-After": seconds},
    )


def _extensions(envelope: PaymentRequirement) -> dict[str, object]:
    """The envelope's extensions, with the idempotency the flow supports (x402's
    ``payment-identifier``: a retry with the same id or ``Idempotency-Key`` never pays twice)."""
    return {**envelope.extensions, **advertised()}


class Refusals:
    """The flow's refusals; each counts itself in ``stats``."""

    def __init__(self, stats: PaidStats, handler_pool: SyncHandlerPool) -> None:
        self.stats = stats
        self.handler_pool = handler_pool

    def busy(self) -> PaidOutcome:
        """More paid requests in flight than allowed: 503 before anything is asked."""
        self.stats.unavailable += 1
        answer = error_answer(
            503,
            "Service Unavailable",
            "The agent is busy; nothing was charged. Retry in a second.",
            **{"Retry-After": "1"},
        )
        return PaidOutcome(Outcome.UNAVAILABLE, answer, "busy")

    def no_plan(self) -> PaidOutcome:
        """No plan to sell on: 503, nothing asked, nothing charged."""
        self.stats.unavailable += 1
        answer = error_answer(
            503,
            "Service Unavailable",
            "This agent is not selling yet: no plan is configured (its operator sets planId "
            "or registers one with svc_registerAgent). Nothing was charged.",
        )
        return PaidOutcome(Outcome.UNAVAILABLE, answer, "no plan")

    def refuse(self, envelope: PaymentRequirement, reason: str) -> PaidOutcome:
        """402 with the request's envelope (priced), ``reason`` as its ``error``."""
        self.stats.refused += 1
        envelope = envelope.model_copy(
            update={"error": reason, "extensions": _extensions(envelope)}
        )
        answer = self.payment_required(envelope, reason)
        return PaidOutcome(Outcome.REFUSED, answer, reason, envelope=envelope)

    def refuse_settle(self, call: PaidCall, reason: str) -> PaidOutcome:
        """402 for a withheld answer: a fresh envelope, and x402's failed ``payment-response``."""
        self.stats.refused += 1
        envelope = call.envelope.model_copy(
            update={"error": reason, "extensions": _extensions(call.envelope)}
        )
        answer = self.payment_required(envelope, f"The payment was not accepted ({reason})")
        receipt = ("payment-response", b64_json(envelope.settle_failure(reason)))
        answer = replace(answer, headers=(*answer.headers, receipt))
        return PaidOutcome(Outcome.WITHHELD, answer, reason, envelope=envelope)

    @staticmethod
    def payment_required(envelope: PaymentRequirement, reason: str) -> Answer:
        body = {"error": "Payment Required", "message": f"{reason}. {GUIDANCE}", "reason": reason}
        return Answer.json(402, body, {"payment-required": b64_json(envelope.x402())})

    def state_outage(self, exc: StateUnavailable) -> PaidOutcome:
        """The shared state store did not answer: fail closed, before the handler."""
        self.stats.unavailable += 1
        log.warning("paid request refused: %s", exc.message)
        answer = retry_later(
            "The agent cannot check your credits right now (its shared billing state is "
            "unreachable)"
        )
        return PaidOutcome(Outcome.UNAVAILABLE, answer, "shared state unreachable")

    def stuck(self) -> Answer:
        """Every thread of the sync handler still runs a request that timed out: new work
        would only wait for a 504. Refused before verify, so nothing is charged."""
        self.stats.unavailable += 1
        log.warning(
            "all %d threads of the agent handler are still running requests that timed out; "
            "new requests get 503 until one returns",
            self.handler_pool.workers,
        )
        return retry_later("The agent is overloaded (its earlier requests are still running)")

    def over_share(self, payer: str | None) -> Answer:
        """The payer's earlier requests already hold their share of the sync handler's threads
        (waiting, running, or still running after a 504): this one is refused before it takes
        a thread, uncharged, so another payer's request still finds one."""
        self.stats.unavailable += 1
        log.info("payer %s holds their share of the handler's threads; answered 503", payer)
        return retry_later(
            "Your earlier requests still hold this agent's share of workers for one payer"
        )

    def outage(self, exc: errors.ServiceError | None, doing: str) -> Answer:
        self.stats.unavailable += 1
        code = exc.code if exc is not None else "timeout"
        log.warning("could not %s: the payment service is unavailable (%s)", doing, code)
        retry = getattr(exc, "retry_after", None)
        seconds = (
            str(max(1, min(round(retry), 300)))
            if isinstance(retry, int | float)
            else str(RETRY_AFTER_SECS)
        )
        return retry_later(
            "The payment service could not be reached to verify your payment", seconds
        )

    def unavailable(self, exc: errors.ServiceError | None, doing: str) -> PaidOutcome:
        answer = self.outage(exc, doing)
        return PaidOutcome(Outcome.UNAVAILABLE, answer, f"could not {doing}")

    def verify_failed(self, exc: errors.ServiceError, envelope: PaymentRequirement) -> PaidOutcome:
        """Map a failed verify call: the payer's fault → 402, the service's or ours → 503/502."""
        if isinstance(exc, errors.PaymentRequired) or (
            isinstance(exc, errors.PermissionDenied) and exc.code.startswith("BCK.X402.")
        ):
            return self.refuse(envelope, exc.message)
        if isinstance(exc, OUTAGE_ERRORS):
            return self.unavailable(exc, "verify a payment")
        self.stats.unavailable += 1
        return PaidOutcome(Outcome.UNAVAILABLE, self.verify_answer(exc), exc.code)

    @staticmethod
    def verify_answer(exc: errors.ServiceError) -> Answer:
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
