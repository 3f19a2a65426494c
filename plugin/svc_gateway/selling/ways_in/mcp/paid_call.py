"""One paid MCP call through the paid flow's seam (``PaidFlow.handle``).

Admission, verify, work, settle, withholding, deadlines and the replay of a retried single-use
token all happen in the flow.

What MCP asks of the seam (``PaidRequest``): ``settle_credits`` when credits are a function of
the result (the flow verifies and claims the ceiling, then settles the priced amount) and
``deliver_unsettled=False`` (SPEC: paid content is never delivered without a successful settle,
so a settle that cannot complete withholds the answer and nothing is queued).
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ....encoding import compact_json
from ....redact import get_logger
from ...flow.admission import token_payer
from ...flow.flow import PaidFlow
from ...flow.replay import digest
from ...handlers import Answer
from ...types import Outcome as FlowOutcome
from ...types import PaidOutcome, PaidRequest

log = get_logger("svc_gateway.paid_mcp")

#: where x402's MCP transport puts the receipt (``_meta``; in a settle failure's result too)
RECEIPT_META = "x402/payment-response"


class Verdict(enum.Enum):
    PAID = "paid"  # settled: result and receipt
    FREE = "free"  # nothing to pay (zero credits): result, no receipt
    REFUSED = "refused"  # payment required: the envelope; nothing ran
    UNAVAILABLE = "unavailable"  # the service or the seller cannot take payments now
    FAILED = "failed"  # the work failed or timed out: nothing charged
    UNSETTLED = "unsettled"  # the work ran but the settle failed: result withheld


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    plan_id: str
    result: Any = None
    envelope: dict[str, Any] | None = None
    message: str = ""
    receipt: dict[str, Any] | None = None
    credits: int = 0
    payer: str | None = None
    transaction: str = ""
    retry_after: str | None = None


#: the handler, its answer normalised to the MCP result (a JSON object)
Work = Callable[[], Awaitable[dict[str, Any]]]
#: credits priced once the work is done (the caller keeps what the handler returned)
Price = Callable[[], Awaitable[int]]


def _body(answer: Answer | None) -> dict[str, Any]:
    try:
        value = json.loads(answer.body) if answer is not None else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def charge(
    flow: PaidFlow,
    *,
    plan_id: str,
    agent_id: str | None,
    token: str | None,
    url: str,
    arguments: dict[str, Any],
    verify_amount: int,
    work: Work,
    price: Price | None,
    idempotency_key: str | None = None,
) -> Outcome:
    """Run ``work`` paid by ``token`` for ``url`` (an ``mcp://`` logical URI). With ``price``
    the amount settled is priced from the result, ``verify_amount`` being its ceiling."""

    async def answer() -> Answer:
        return Answer.json(200, await work())

    async def settle_credits(_done: Answer) -> int:
        assert price is not None
        raw = await price()
        return (await flow.facts(plan_id)).clamp(raw) if raw > 0 else 0

    request = PaidRequest(
        token=token,
        url=url,
        work=answer,
        plan_id=plan_id,
        agent_id=agent_id,
        credits=verify_amount,
        route=url,
        body_digest=digest(compact_json(arguments)),
        settle_credits=settle_credits if price is not None else None,
        deliver_unsettled=False,
        idempotency_key=idempotency_key,
    )
    outcome = await flow.handle(request)
    return _outcome(outcome, plan_id, token)


def _outcome(outcome: PaidOutcome, plan_id: str, token: str | None) -> Outcome:
    kind = outcome.kind
    payer = token_payer(token) if token else None
    if kind is FlowOutcome.PAID:
        result = _body(outcome.result)
        receipt = outcome.receipt
        if receipt is None:
            return Outcome(Verdict.FREE, plan_id, result=result, payer=payer)
        return Outcome(
            Verdict.PAID,
            plan_id,
            result=result,
            receipt=receipt,
            credits=int(str(receipt.get("creditsRedeemed") or 0)),
            payer=str(receipt.get("payer") or payer or ""),
            transaction=str(receipt.get("transaction") or ""),
        )
    message = str(_body(outcome.answer).get("message") or outcome.reason or kind.value)
    required = outcome.envelope
    envelope = required.x402() if required is not None else None
    if kind is FlowOutcome.REFUSED:
        return Outcome(Verdict.REFUSED, plan_id, envelope=envelope, message=message, payer=payer)
    if kind in (FlowOutcome.WITHHELD, FlowOutcome.DEFERRED):
        if required is not None and envelope is not None:
            # x402's MCP settle failure: the PaymentRequired with the failed receipt in it
            envelope["error"] = f"settlement failed: {outcome.reason}"
            envelope[RECEIPT_META] = required.settle_failure(outcome.reason)
        return Outcome(
            Verdict.UNSETTLED,
            plan_id,
            envelope=envelope,
            message=f"The payment could not be settled ({outcome.reason}); the answer was "
            "withheld and nothing was delivered.",
            payer=payer,
        )
    if kind is FlowOutcome.WORK_FAILED:
        return Outcome(Verdict.FAILED, plan_id, message=message, payer=payer)
    retry = dict(outcome.answer.headers).get("Retry-After")
    return Outcome(Verdict.UNAVAILABLE, plan_id, message=message, retry_after=retry)


async def run_free(flow: PaidFlow, plan_id: str, work: Work) -> Outcome:
    """A zero-credit call: no payment asked, the same handler deadline."""
    deadline = asyncio.timeout(flow.seller.settings.handler_timeout_secs)
    try:
        async with deadline:
            result = await work()
    except Exception as exc:
        timed_out = isinstance(exc, TimeoutError) and deadline.expired()
        log.error("free MCP handler %s", "timed out" if timed_out else type(exc).__name__)
        return Outcome(
            Verdict.FAILED,
            plan_id,
            message="The agent did not answer in time." if timed_out else "The agent failed.",
        )
    return Outcome(Verdict.FREE, plan_id, result=result)
