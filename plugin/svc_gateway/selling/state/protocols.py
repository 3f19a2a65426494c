"""What a paid flow remembers between requests, as two small async interfaces.

:class:`AdmissionBook` holds, per (plan, payer), the known balance and the credits in flight;
:class:`SettleStore` holds the settles owed after an outage, each retried with its own
``agentRequestId``. The in-process implementations are :class:`~.billing.CreditBook` and
:class:`~.settle_journal.SettleJournal`; a shared store (Redis) implements the same protocols
so several replicas admit and settle as one.

Contract for implementations:

* ``admit`` is called only for a request verify accepted: covered (``balance - in_flight >=
  amount``) → admitted; short with nothing in flight for the payer → admitted when
  ``verified_balance`` is ``None`` or short too (the delegation tops up at settle; one request
  at a time), else the balance is read again before deciding; short with credits in flight →
  refused;
* every :class:`Admission` returned by ``admit`` or ``restore`` is closed by exactly one of
  ``settled``, ``release``, ``refused`` (an implementation may also let an unclosed claim
  expire, for a process that died; ``Admission.claim_id`` names it then);
* ``restore`` counts an owed (queued) settle as in flight unconditionally, even when that
  leaves the payer below zero (issue 16 #7: after a restart, credits owed are not for sale);
* ``claim`` returns entries this process should retry now; an entry it returns stays in the
  store until ``remove`` (a leased implementation hands it to another process when the lease
  expires); ``add`` of an existing ``request_id`` replaces it;
* ``begin`` is atomic: of concurrent begins on one scope (on any replica) exactly one gets
  ``NEW`` and holds the scope until its ``finish`` or ``abandon`` (or its lease runs out);
  ``finish``/``abandon`` with a lease that no longer holds the scope do nothing;
* ``add`` may return the request ids it evicted to stay within its bound (the flow releases
  their admissions: those answers will never be paid), or ``None`` when it evicts nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .book import Admission, Refusal
from .idempotency import Begun, Kept
from .settle_queue import PendingSettle

__all__ = [
    "Admission",
    "AdmissionBook",
    "Begun",
    "IdempotencyStore",
    "Kept",
    "PendingSettle",
    "Refusal",
    "SettleStore",
]


class AdmissionBook(Protocol):
    """Per (plan, payer): the known balance and the credits in flight."""

    async def admit(
        self, plan_id: str, payer: str, amount: int, verified_balance: int | None = None
    ) -> Admission | Refusal:
        """Claim ``amount`` credits for one verified request, or say why not. Rule: admitted
        when ``balance - in_flight >= amount``; else, with nothing in flight for the payer,
        admitted when ``verified_balance`` (what verify reported; ``None``: not reported) is
        ``None`` or short of ``amount`` (verify passed through top-up: authoritative for one
        request). Service errors of a balance read propagate (the flow answers 503)."""
        ...

    async def restore(
        self, plan_id: str, payer: str, amount: int, request_id: str = ""
    ) -> Admission:
        """Count an owed (queued) settle as in flight, unconditionally. ``request_id`` is the
        settle's ``agentRequestId`` (a shared book may use it to count each owed settle once)."""
        ...

    async def settled(self, admission: Admission, redeemed: int, remaining: int | None) -> None:
        """The service burned ``redeemed`` and says ``remaining`` is left."""
        ...

    async def release(self, admission: Admission) -> None:
        """Nothing was burned, nor will be through this admission."""
        ...

    async def refused(self, admission: Admission) -> None:
        """The service refused to burn for want of credits."""
        ...

    async def aclose(self) -> None: ...


class SettleStore(Protocol):
    """Settles owed after an outage, each retried with its own ``agentRequestId``."""

    async def add(self, entry: PendingSettle) -> Sequence[str] | None: ...

    async def remove(self, request_id: str) -> None: ...

    async def claim(self, limit: int = 100) -> list[PendingSettle]:
        """Entries this process should retry now (local: oldest first; shared: leased)."""
        ...

    async def entries(self) -> list[PendingSettle]:
        """Every owed entry."""
        ...

    async def count(self) -> int: ...

    async def aclose(self) -> None: ...


class IdempotencyStore(Protocol):
    """The answers paid requests bought, kept under their buyers' idempotency keys
    (:mod:`.idempotency`): ``scope`` names payer and key, ``fingerprint`` the request."""

    async def begin(self, scope: str, fingerprint: str) -> Begun:
        """NEW (this request holds the scope now), RUNNING, REUSED (another fingerprint) or
        DONE (with what was kept)."""
        ...

    async def finish(self, scope: str, lease: str, kept: Kept) -> None:
        """Keep what the request holding ``lease`` bought, for the store's time to live."""
        ...

    async def abandon(self, scope: str, lease: str) -> None:
        """Nothing was bought: free the scope, so a retry is judged afresh."""
        ...

    async def aclose(self) -> None: ...
