"""The sandbox's clock seam: every expiry the sandbox knows reads one injectable clock.

Tokens, delegations, checkout links, time plans, expirable credits and verified agent
requests all expire against ``Store.clock``. Pass a :class:`ManualClock` to
:func:`~svc_gateway.sandbox.start_sandbox` (or :func:`~svc_gateway.sandbox.create_app`) and
move time with :meth:`ManualClock.advance` to exercise expiry without mocks or sleeps.
"""

from __future__ import annotations

import time


class ManualClock:
    """A clock that moves only when told to (seconds since the epoch, as ``time.time``)."""

    def __init__(self, start: float | None = None) -> None:
        self.now = float(time.time() if start is None else start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move forward (never back) by ``seconds``; returns the new time."""
        if seconds < 0:
            raise ValueError("a ManualClock only moves forward")
        self.now += seconds
        return self.now
