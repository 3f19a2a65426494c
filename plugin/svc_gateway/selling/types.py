"""The flow's seam: a request to sell (:class:`PaidRequest`) in, a :class:`PaidOutcome` out.

Every way to sell (the paid endpoint, the middleware's routes, MCP tool calls, metered host
tools) builds a ``PaidRequest`` and maps the ``PaidOutcome`` back to its protocol. The
outcome is protocol-neutral (``kind``, ``reason``, ``envelope``, ``receipt``, ``result``);
``answer`` is its HTTP rendering, which the HTTP adapters send as is.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..service.models import PaymentRequirement, Scheme
from .handlers import Answer

#: produces the answer once the payment is verified; its exceptions mean "work failed"
Work = Callable[[], Awaitable[Answer]]
#: the credits of this request (called after the token is checked, before verify)
Price = Callable[[], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class PaidRequest:
    """One request to sell, as an adapter hands it to :meth:`PaidFlow.handle`.

    ``plan_id``/``agent_id``/``credits`` ``None``: the flow's own (the endpoint's config
    precedence); ``agent_id`` ``""``: no agent (metered host tools are not the agent's).
    ``scheme``/``network`` override the plan's; ``description``/``mime_type`` go into the
    envelope's resource. ``route`` names what is sold (replay key), and
    ``body_digest`` (a digest of the request body) enables replaying the answer a settled
    single-use token paid for. ``connected`` says whether the client is still there; when it
    says no after the work, nothing is settled."""

    token: str | None
    url: str
    work: Work
    verb: str = "POST"
    plan_id: str | None = None
    agent_id: str | None = None
    credits: int | Price | None = None
    scheme: Scheme | None = None
    network: str | None = None
    description: str | None = None
    mime_type: str | None = None
    route: str = ""
    body_digest: str | None = None
    connected: Callable[[], bool] | None = None
    #: priced from the work's answer (MCP: credits as a function of the result): ``credits``
    #: is then the ceiling verified and claimed first, this the amount settled (0: none)
    settle_credits: Callable[[Answer], Awaitable[int]] | None = None
    #: False: a settle that cannot complete now withholds the answer and queues nothing
    #: (MCP: paid content is never delivered unpaid); True: deliver and queue (HTTP)
    deliver_unsettled: bool = True
    #: the buyer's idempotency key (HTTP ``Idempotency-Key``, x402 ``payment-identifier``, MCP
    #: ``_meta["x402/idempotency-key"]``, the A2A message id, a host tool's call id): a retry
    #: with it gets the answer it paid for, never a second charge (:mod:`.flow.idempotency`)
    idempotency_key: str | None = None


class Outcome(enum.Enum):
    REFUSED = "refused"  # no, bad or insufficient payment: pay (envelope) and retry
    UNAVAILABLE = "unavailable"  # the service, this seller or its config: nothing charged
    WORK_FAILED = "work_failed"  # verified, but the work failed (or the client left): uncharged
    PAID = "paid"  # done, settled: ``result`` with ``receipt`` (or replayed to a retry)
    WITHHELD = "withheld"  # done, but settle proved the payer did not pay: no result
    DEFERRED = "deferred"  # done, settle not possible now (queued) or lost: result, no receipt
    CONFLICT = "conflict"  # its idempotency key is running (409), reused (422) or bad (400)


@dataclass(frozen=True, slots=True)
class PaidOutcome:
    """What became of one :class:`PaidRequest`."""

    kind: Outcome
    answer: Answer
    reason: str = ""
    envelope: PaymentRequirement | None = None
    receipt: dict[str, Any] | None = None
    result: Answer | None = None
    replayed: bool = False
    #: how settling ended, when it started: ``paid``, ``refused``, ``deferred`` (queued),
    #: ``lost`` (the service refused for a reason that is not the payer's) or ``withheld``
    #: (``deliver_unsettled=False``: not settled now, the answer withheld, nothing queued)
    settle: str | None = None
    #: the verify's ``agentRequestId`` the settle used (a queued settle is retried on it)
    request_id: str | None = None

    @property
    def delivered(self) -> bool:
        """The work's result goes to the client."""
        return self.kind in (Outcome.PAID, Outcome.DEFERRED)
