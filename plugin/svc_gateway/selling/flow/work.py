"""The flow's middle: the work run within its deadline (its failures answered, never
charged), a client gone before its answer, and an answer priced after the fact.

:class:`Worker` is a part the flow holds; it counts in the flow's :class:`PaidStats`. It names
the payer to a sync handler's pool (:data:`~svc_gateway.selling.handlers.HANDLER_PAYER`), which
keeps each payer to a fair share of its threads; a payer over it is refused 503 (uncharged).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace

from ...redact import get_logger
from ...service.seller import Seller
from ..handlers import HANDLER_PAYER, Answer, HandlerError, OverShare
from ..state.stats import PaidStats
from ..types import Outcome, PaidOutcome, PaidRequest
from .calls import PaidCall
from .refusals import Refusals, error_answer

log = get_logger("svc_gateway.paid")


class Worker:
    """Runs a verified request's work; counts handler failures, timeouts and abandons."""

    def __init__(self, seller: Seller, stats: PaidStats, refusals: Refusals) -> None:
        self.seller = seller
        self.stats = stats
        self.refusals = refusals

    async def price_answer(
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
        if amount > call.amount:  # authorize, then capture: never more than was verified
            log.warning(
                "the credits function priced %d credits, above the %d verified and claimed for "
                "agentRequestId %s; settling %d",
                amount,
                call.amount,
                call.request_id,
                call.amount,
            )
            amount = call.amount
        return replace(call, amount=amount)

    async def run(self, request: PaidRequest, payer: str | None = None) -> Answer:
        """The work's answer within ``handlerTimeoutSecs``, or the error answer (not charged)
        its failure gets. ``payer`` (verify's) counts against their fair share of a sync
        handler's threads; over it, 503. A cancellation from outside (the request is gone)
        propagates."""
        secs = self.seller.settings.handler_timeout_secs
        named = HANDLER_PAYER.set(payer)
        deadline = asyncio.timeout(secs)
        try:
            async with deadline:
                answer = await request.work()
        except OverShare:
            return self.refusals.over_share(payer)
        except (Exception, asyncio.CancelledError) as exc:
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling():
                raise  # cancelled from outside, not a handler's own CancelledError
            if isinstance(exc, TimeoutError) and deadline.expired():
                self.stats.handler_timeouts += 1
                log.warning(
                    "agent handler took longer than %g s; answered 504, not charged",
                    secs,
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
        finally:
            HANDLER_PAYER.reset(named)
        if not answer.ok:
            self.stats.handler_failures += 1
            log.info("agent handler answered %s; not settled, not charged", answer.status)
        return answer

    def abandoned(self, call: PaidCall) -> Answer:
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
