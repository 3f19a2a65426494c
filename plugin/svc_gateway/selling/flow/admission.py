"""The flow's first half: received → 402 / 503 / 502, or a verified call whose credits are
claimed (plan facts, the token's form, a replayed answer, the price, the envelope, verify, the
admission book).

:class:`Admitter` is a part the flow holds; it keeps the prebuilt envelopes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from ...encoding import decode_access_token, decode_b64_json, token_authorization
from ...redact import get_logger
from ...service import errors
from ...service.models import PaymentRequirement, VerifyResult
from ...service.seller import Seller
from ..state.book import Admission, Refusal
from ..state.protocols import AdmissionBook
from ..state.shared import StateUnavailable
from ..state.stats import PaidStats
from ..types import Outcome, PaidOutcome, PaidRequest
from .calls import PaidCall
from .plans import OUTAGE_ERRORS, PlanFacts, build_envelope, payment_deadline_secs
from .refusals import Refusals, error_answer
from .replay import Paid, ReplayCache
from .tracing import NullTrace

log = get_logger("svc_gateway.paid")

#: a longer ``payment-signature`` is no token we issued; refused without asking the service
MAX_TOKEN_CHARS = 16384
#: what a token is made of (JWT or base64url/base64 JSON); anything else is refused unasked
TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/=-]+")
#: envelopes kept prebuilt (one per plan facts, agent id and URL seen)
ENVELOPES_KEPT = 64

#: the plan's facts for a plan id (raises on a service outage)
FactsFn = Callable[[str], Awaitable[PlanFacts]]


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


class Admitter:
    """Admit one request or say no; counts in ``stats``, claims credits in ``book``."""

    def __init__(
        self,
        seller: Seller,
        *,
        facts: FactsFn,
        book: AdmissionBook,
        replays: ReplayCache,
        stats: PaidStats,
        refusals: Refusals,
    ) -> None:
        self.seller = seller
        self.facts = facts
        self.book = book
        self.replays = replays
        self.stats = stats
        self.refusals = refusals
        self.envelopes: dict[tuple[Any, ...], PaymentRequirement] = {}
        #: each prebuilt envelope's wire JSON, by the envelope's identity
        self._wires: dict[int, tuple[PaymentRequirement, bytes]] = {}

    async def admit(
        self,
        plan_id: str,
        agent_id: str | None,
        request: PaidRequest,
        trace: NullTrace,
    ) -> PaidOutcome | PaidCall:
        """received → 402 / 503 / 502, or a verified call whose credits are claimed."""
        refusals = self.refusals
        try:
            facts = self.override(await self.facts(plan_id), request)
        except OUTAGE_ERRORS as exc:
            return refusals.unavailable(exc, "read the plan")
        if trace.enabled:
            trace.set(scheme=facts.scheme, network=facts.network)
        try:  # priced first: every 402 states the price (x402 ``amount``)
            credits = request.credits
            if credits is None:  # the seller's price
                price = self.seller.settings.credits_per_request
            elif isinstance(credits, int):  # a fixed price: no coroutine to await
                price = credits
            else:  # the request's price function
                price = await credits()
            amount = facts.clamp(price)
        except Exception as exc:
            log.error("the credits function failed (%s); request refused", type(exc).__name__)
            answer = error_answer(
                500, "Internal Server Error", "The agent could not price this request."
            )
            return PaidOutcome(Outcome.WORK_FAILED, answer, "the credits function failed")
        envelope = self.envelope(
            facts,
            agent_id,
            request.url,
            verb=request.verb,
            description=request.description,
            mime_type=request.mime_type,
            amount=amount,
        )
        token = request.token
        if not token:
            return refusals.refuse(envelope, "No payment-signature header was sent")
        if len(token) > MAX_TOKEN_CHARS or not TOKEN_RE.fullmatch(token):
            return refusals.refuse(envelope, "The payment-signature is not a valid token")
        if request.body_digest is not None:
            paid = self.replays.lookup(token, request.route)
            if paid is not None and paid.body == request.body_digest:
                return self.replay(paid)
        with trace.verify():
            if trace.enabled:
                trace.set(credits_requested=amount)
            wire = self.wire_json(envelope)
            try:
                client = self.seller.client()
                verdict = await client.verify(envelope, token, amount, envelope_json=wire)
            except errors.ServiceError as exc:
                trace.fail(exc.code)
                return refusals.verify_failed(exc, envelope)
            if not verdict.is_valid:
                reason = verdict.invalid_reason or "The access token was not accepted"
                trace.fail(reason)
                log.info("payment refused on plan %s: %s", plan_id, reason)
                return refusals.refuse(envelope, reason)
            payer = verdict.payer or token_payer(token)
            if trace.enabled:
                trace.set(payer=payer)
        admission: Admission | None = None
        if payer and not facts.is_time:  # access to a time plan is not metered per request
            try:
                claim = await self.book.admit(plan_id, payer, amount, verified_balance(verdict))
            except StateUnavailable as exc:
                return refusals.state_outage(exc)
            except OUTAGE_ERRORS as exc:
                return refusals.unavailable(exc, "read the payer's balance")
            except errors.ServiceError as exc:
                # verify accepted the token; settle will still refuse a payer who cannot pay
                log.warning("could not read payer %s's balance (%s); not metered", payer, exc.code)
                claim = None
            if isinstance(claim, Refusal):
                return refusals.refuse(envelope, claim.reason)
            admission = claim
        return PaidCall(envelope, token, amount, verdict.request_id, payer, admission, wire)

    async def verified_payer(
        self,
        plan_id: str,
        agent_id: str | None,
        token: str,
        url: str,
        *,
        description: str | None = None,
    ) -> str | None:
        """The payer of ``token`` once the service verified it for this plan, agent and URL
        (for at least the plan's smallest price); nothing claimed, nothing counted. ``None``:
        no well-formed token, or the service refused it. Raises the service's error when it
        cannot say (an outage, this gateway's own key): an unknown payer is no payer."""
        if not token or len(token) > MAX_TOKEN_CHARS or not TOKEN_RE.fullmatch(token):
            return None
        facts = await self.facts(plan_id)
        amount = facts.clamp(1)
        envelope = self.envelope(facts, agent_id, url, description=description, amount=amount)
        try:
            verdict = await self.seller.client().verify(envelope, token, amount)
        except errors.ServiceError as exc:
            if isinstance(exc, errors.PaymentRequired) or (
                isinstance(exc, errors.PermissionDenied) and exc.code.startswith("BCK.X402.")
            ):
                return None
            raise
        if not verdict.is_valid:
            return None
        payer = verdict.payer or token_payer(token)
        return payer.lower() if payer else None

    def replay(self, paid: Paid) -> PaidOutcome:
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
    def override(facts: PlanFacts, request: PaidRequest) -> PlanFacts:
        """The plan's facts with the request's own scheme / network, when it names them."""
        if request.scheme is None and request.network is None:
            return facts
        return replace(
            facts,
            scheme=request.scheme or facts.scheme,
            network=request.network or facts.network,
        )

    def envelope(
        self,
        facts: PlanFacts,
        agent_id: str | None,
        url: str,
        *,
        verb: str = "POST",
        description: str | None = None,
        mime_type: str | None = None,
        amount: int,
    ) -> PaymentRequirement:
        """The request's envelope, built once per (plan facts, agent, URL, verb, resource
        description, amount) and then shared (never mutated: a refusal copies it)."""
        key = (facts, agent_id, url, verb, description, mime_type, amount)
        envelope = self.envelopes.get(key)
        if envelope is None:
            if len(self.envelopes) >= ENVELOPES_KEPT:
                self.envelopes.clear()
                self._wires.clear()
            envelope = self.envelopes[key] = build_envelope(
                facts,
                agent_id,
                url,
                verb=verb,
                description=description,
                mime_type=mime_type,
                amount=amount,
                max_timeout_secs=payment_deadline_secs(self.seller.settings),
            )
        return envelope

    def wire_json(self, envelope: PaymentRequirement) -> bytes:
        """The envelope's wire JSON (verify's and settle's ``paymentRequired``), serialised
        once per prebuilt envelope (envelopes are never mutated: a refusal copies one)."""
        kept = self._wires.get(id(envelope))
        if kept is not None and kept[0] is envelope:
            return kept[1]
        wire = envelope.wire_json()
        if len(self._wires) >= ENVELOPES_KEPT:
            self._wires.clear()
        self._wires[id(envelope)] = (envelope, wire)
        return wire
