"""What a verified call carries to settle, and what settling it came to (below every part of
the flow: the admission makes a :class:`PaidCall`, the settler and the refusals read it)."""

from __future__ import annotations

import enum
from typing import Any

from ...records import record
from ...service.models import PaymentRequirement, SettleResult
from ..state.book import Admission


class Settled(enum.Enum):
    PAID = "paid"  # receipt attached
    REFUSED = "refused"  # the payer did not pay: answer withheld, 402
    DEFERRED = "deferred"  # outage: 2xx without receipt, queued for retry
    LOST = "lost"  # definitive failure that is not the payer's: 2xx, logged, counted


@record
class SettleOutcome:
    kind: Settled
    reason: str = ""
    receipt: dict[str, Any] | None = None
    result: SettleResult | None = None


@record
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
