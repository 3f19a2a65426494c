"""What a verified call carries to settle, and what settling it came to (below every part of
the flow: the admission makes a :class:`PaidCall`, the settler and the refusals read it; a
settle's answer or error read as a :class:`Settled` kind)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ...service import errors
from ...service.models import PaymentRequirement, SettleResult
from ..state.book import Admission


class Settled(enum.Enum):
    PAID = "paid"  # receipt attached
    REFUSED = "refused"  # the payer did not pay: answer withheld, 402
    DEFERRED = "deferred"  # outage: 2xx without receipt, queued for retry
    LOST = "lost"  # definitive failure that is not the payer's: 2xx, logged, counted


@dataclass(frozen=True, slots=True)
class SettleOutcome:
    kind: Settled
    reason: str = ""
    receipt: dict[str, Any] | None = None
    result: SettleResult | None = None


@dataclass(frozen=True, slots=True)
class PaidCall:
    """What a verified, admitted request carries to settle."""

    envelope: PaymentRequirement
    token: str
    amount: int
    request_id: str | None
    payer: str | None
    admission: Admission | None
    #: ``envelope.wire_json()``, serialised once for every request that shares the envelope
    envelope_json: bytes | None = None


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


def not_mine(exc: BaseException) -> bool:
    """A 403 that is not the payer's refusal (``BCK.X402.*``): this key may not settle that
    plan's requests ("only the owner"). A queued one stays for its owner: it is not lost."""
    return isinstance(exc, errors.PermissionDenied) and not exc.code.startswith("BCK.X402.")


def answered(result: SettleResult) -> SettleOutcome:
    """What a settle the service answered came to."""
    if result.success:
        return SettleOutcome(Settled.PAID, receipt=result.receipt(), result=result)
    # the service answered and burned nothing: the payer did not pay
    return SettleOutcome(
        Settled.REFUSED, result.error_reason or "the service answered success: false"
    )
