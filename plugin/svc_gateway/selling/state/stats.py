"""The builder's counters of one paid flow (a shared store adds every replica's together)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

#: receipts kept for the builder to read (the newest)
RECEIPTS_KEPT = 100


@dataclass
class PaidStats:
    """Counters the builder can read (the demo checks its receipts against the subscriber's).

    ``abandoned``: answers ready after their client went away (not settled, not charged);
    ``settle_deferred``: answers delivered while settle could not reach the service (queued);
    ``settle_recovered``: queued settles that later succeeded; ``settle_lost``: answers
    delivered that will never be paid (the service refused the settle for a reason that is not
    the payer's, or a queued entry could not be kept); ``settle_queue``: queued right now."""

    requests: int = 0
    refused: int = 0
    unavailable: int = 0
    handler_failures: int = 0
    handler_timeouts: int = 0
    abandoned: int = 0
    settled: int = 0
    credits_settled: int = 0
    settle_failures: int = 0
    settle_refused: int = 0
    settle_deferred: int = 0
    settle_recovered: int = 0
    settle_lost: int = 0
    settle_queue: int = 0
    replayed: int = 0
    receipts: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECEIPTS_KEPT))
