"""One paid MCP call through the paid flow (:mod:`svc_gateway.paid.flow`): admit, verify, work,
price, settle, withhold, with the flow's book, stats, deadlines and in-flight limit.

This is the only module of the MCP server that touches the flow, through :func:`charge`. MCP
differs from the HTTP endpoint in two ways the flow's HTTP entry point cannot express, hence this
narrow function over the flow's own steps instead of ``PaidFlow.serve``:

* credits may depend on the result (SPEC: a function of the call context), so the call verifies
  and claims ``verify_amount`` first and settles the amount priced after the work;
* paid content is never delivered without a successful settle (SPEC, MCP errors): a settle that
  cannot reach the service withholds the answer and is *not* queued (the HTTP endpoint, which
  delivers the answer, queues it instead).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from .. import errors
from ..encoding import decode_b64_json
from ..paid.billing import Admission, Refusal
from ..paid.flow import (
    MAX_TOKEN_CHARS,
    TOKEN_RE,
    PaidCall,
    PaidFlow,
    Settled,
    SettleOutcome,
    token_payer,
)
from ..paid.handlers import Answer
from ..paid.plans import OUTAGE_ERRORS
from ..redact import get_logger

log = get_logger("svc_gateway.paid_mcp")


class Verdict(enum.Enum):
    PAID = "paid"  # settled: result and receipt
    FREE = "free"  # nothing to pay (zero credits): result, no receipt
    REFUSED = "refused"  # payment required: the envelope, nothing ran or nothing delivered
    UNAVAILABLE = "unavailable"  # the service or the agent cannot take payments now
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


Work = Callable[[], Awaitable[Any]]
Price = Callable[[Any], Awaitable[int]]


async def charge(
    flow: PaidFlow,
    *,
    plan_id: str,
    token: str | None,
    url: str,
    verify_amount: int,
    work: Work,
    price: Price,
) -> Outcome:
    """Run ``work`` paid by ``token`` for the resource ``url`` (an ``mcp://`` logical URI)."""
    if flow._in_flight >= flow.max_in_flight:
        flow.stats.unavailable += 1
        return Outcome(
            Verdict.UNAVAILABLE,
            plan_id,
            message="The agent is busy; nothing was charged. Retry in a second.",
            retry_after="1",
        )
    flow._in_flight += 1
    flow.stats.requests += 1
    try:
        return await _charge(flow, plan_id, token, url, verify_amount, work, price)
    finally:
        flow._in_flight -= 1


async def _charge(
    flow: PaidFlow,
    plan_id: str,
    token: str | None,
    url: str,
    verify_amount: int,
    work: Work,
    price: Price,
) -> Outcome:
    budget = asyncio.timeout(flow.core.config.paid_budget_secs)
    try:
        async with budget:
            admitted = await _admit(flow, plan_id, token, url, verify_amount)
    except TimeoutError:
        if not budget.expired():
            raise
        admitted = flow._outage(None, "verify a payment in time")
    if isinstance(admitted, Answer):
        return _from_answer(admitted, plan_id)
    call = admitted
    done = await _work(flow, call, work)
    if isinstance(done, Outcome):
        return done
    result = done
    try:
        facts = await flow.facts(plan_id)
        raw = await price(result)
        amount = facts.clamp(raw) if raw > 0 else 0
    except Exception as exc:
        flow._release(call)
        flow.stats.handler_failures += 1
        log.error("the credits function failed (%s); not charged", type(exc).__name__)
        return Outcome(
            Verdict.FAILED, plan_id, message="The agent could not price this call; not charged."
        )
    if amount == 0:
        flow._release(call)
        return Outcome(Verdict.FREE, plan_id, result=result, payer=call.payer)
    call = replace(call, amount=amount)
    outcome = await _settle(flow, call)
    if outcome.kind is Settled.PAID:
        assert outcome.receipt is not None
        return Outcome(
            Verdict.PAID,
            plan_id,
            result=result,
            receipt=outcome.receipt,
            credits=int(outcome.receipt["creditsRedeemed"]),
            payer=call.payer or outcome.receipt.get("payer"),
            transaction=str(outcome.receipt.get("transaction") or ""),
        )
    envelope = call.envelope.model_copy(update={"error": f"settlement failed: {outcome.reason}"})
    return Outcome(
        Verdict.UNSETTLED,
        plan_id,
        envelope=envelope.wire(),
        message=f"The payment could not be settled ({outcome.reason}); the answer was withheld "
        "and nothing was delivered.",
        payer=call.payer,
    )


async def _admit(
    flow: PaidFlow, plan_id: str, token: str | None, url: str, amount: int
) -> Answer | PaidCall:
    """The flow's admission (``PaidFlow._admit``) with the amount given rather than priced."""
    agent_id = flow.agent_id()
    try:
        facts = await flow.facts(plan_id)
    except OUTAGE_ERRORS as exc:
        return flow._outage(exc, "read the plan")
    if not token:
        return flow._refuse(facts, agent_id, url, "No payment was sent (_meta x402/payment)")
    if len(token) > MAX_TOKEN_CHARS or not TOKEN_RE.fullmatch(token):
        return flow._refuse(facts, agent_id, url, "The payment is not a valid access token")
    amount = facts.clamp(amount)
    envelope = flow._envelope(facts, agent_id, url)
    try:
        verdict = await flow.core.client().verify(envelope, token, amount)
    except errors.ServiceError as exc:
        return flow._verify_failed(exc, facts, agent_id, url)
    if not verdict.is_valid:
        reason = verdict.invalid_reason or "The access token was not accepted"
        log.info("MCP payment refused on plan %s: %s", plan_id, reason)
        return flow._refuse(facts, agent_id, url, reason)
    payer = verdict.payer or token_payer(token)
    admission: Admission | None = None
    if payer:
        try:
            claim = await flow.book.admit(plan_id, payer, amount)
        except OUTAGE_ERRORS as exc:
            return flow._outage(exc, "read the payer's balance")
        except errors.ServiceError as exc:
            log.warning("could not read payer %s's balance (%s); not metered", payer, exc.code)
            claim = None
        if isinstance(claim, Refusal):
            return flow._refuse(facts, agent_id, url, claim.reason)
        admission = claim
    return PaidCall(envelope, token, amount, verdict.request_id, payer, admission)


async def _work(flow: PaidFlow, call: PaidCall, work: Work) -> Any:
    deadline = asyncio.timeout(flow.core.config.handler_timeout_secs)
    try:
        async with deadline:
            return await work()
    except Exception as exc:
        flow._release(call)
        if isinstance(exc, TimeoutError) and deadline.expired():
            flow.stats.handler_timeouts += 1
            log.warning("MCP handler took too long; not charged")
            return Outcome(
                Verdict.FAILED,
                call.envelope.accepts[0].plan_id,
                message="The agent did not answer in time; nothing was charged.",
            )
        flow.stats.handler_failures += 1
        log.error("MCP handler raised %s; not charged", type(exc).__name__)
        return Outcome(
            Verdict.FAILED,
            call.envelope.accepts[0].plan_id,
            message="The agent failed to answer; nothing was charged.",
        )


async def _settle(flow: PaidFlow, call: PaidCall) -> SettleOutcome:
    """The flow's settle attempts within the budget; a failure that is not the payer's is
    withheld (never queued: the answer is not delivered, so it must not be paid later)."""
    budget = asyncio.timeout(flow.core.config.paid_budget_secs)
    try:
        async with budget:
            outcome = await flow._settle_attempts(call)
    except TimeoutError:
        if not budget.expired():  # pragma: no cover - _settle_attempts catches every Exception
            raise
        outcome = SettleOutcome(Settled.DEFERRED, "no answer within the paid budget")
    if outcome.kind in (Settled.PAID, Settled.REFUSED):
        flow._record(call, outcome)
        return outcome
    flow.stats.settle_failures += 1
    flow._release(call)
    log.error(
        "settle failed for agentRequestId %s (payer %s): %s; over MCP an answer is never "
        "delivered unpaid, so it was withheld (not queued)",
        call.request_id,
        call.payer or "unknown",
        outcome.reason,
    )
    return outcome


def _from_answer(answer: Answer, plan_id: str) -> Outcome:
    """A refusal or outage the flow answered in HTTP terms, as an MCP outcome."""
    headers = dict(answer.headers)
    body = decode_json(answer.body)
    message = str(body.get("message") or body.get("error") or "unavailable")
    if answer.status == 402:
        envelope = decode_b64_json(headers.get("payment-required")) or {}
        return Outcome(Verdict.REFUSED, plan_id, envelope=envelope, message=message)
    return Outcome(
        Verdict.UNAVAILABLE, plan_id, message=message, retry_after=headers.get("Retry-After")
    )


def decode_json(raw: bytes) -> dict[str, Any]:
    import json

    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def run_free(flow: PaidFlow, plan_id: str, work: Work) -> Outcome:
    """A zero-credit call: no payment asked, the same handler deadline."""
    deadline = asyncio.timeout(flow.core.config.handler_timeout_secs)
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
