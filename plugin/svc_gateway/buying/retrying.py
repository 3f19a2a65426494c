"""A paid call retried safely (issue 46): one idempotency key per logical query, sent with every
attempt, and the same token, so a seller that kept the answer replays it and one that did not
settles the single-use token at most once.

A retry happens on a dropped connection or a timeout of one attempt (the answer lost in
flight), and on a 409 (the first attempt still running: wait its ``Retry-After``), a bounded
number of times and always within the query's one deadline (the caller's ``asyncio.timeout``).
A reusable (v2) token is never retried: a seller that keeps no answer would charge it again.
The model calling the tool twice is two queries (two keys); a retry inside one call is not.

Shared by svc_queryAgent's paths (HTTP, MCP, A2A); a CLI may reuse :func:`with_retries`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..redact import get_logger

log = get_logger("svc_gateway.buying")

T = TypeVar("T")

#: attempts at most, the first included
MAX_ATTEMPTS = 3
#: the longest a 409's ``Retry-After`` is waited for (the deadline may cut it shorter)
MAX_BUSY_WAIT_SECS = 5.0
#: of the time left, what a later attempt keeps (at least MIN_RETRY_SECS): the first gets the
#: rest; with less than twice MIN_RETRY_SECS left, an attempt gets all of it
RETRY_RESERVE = 0.25
MIN_RETRY_SECS = 2.0
#: the HTTP header, MCP ``_meta`` key and A2A metadata key the key travels in
IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_META = "x402/idempotency-key"


def new_key() -> str:
    """A key for one logical query (x402's ``payment-identifier`` form: 16-128 of
    ``[A-Za-z0-9_-]``)."""
    return "svc_" + uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class Retried(Generic[T]):
    """What the last attempt got, and how many attempts it took."""

    value: T
    attempts: int

    @property
    def from_retry(self) -> bool:
        return self.attempts > 1


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    lost: Callable[[BaseException], bool],
    busy: Callable[[T], float | None] = lambda _value: None,
    attempts: int = MAX_ATTEMPTS,
    deadline: float | None = None,
    min_retry_secs: float = MIN_RETRY_SECS,
) -> Retried[T]:
    """``attempt()`` until it answers, at most ``attempts`` times: again when it raises what
    ``lost`` says is an answer lost in flight (a dropped connection), when it takes longer
    than its share of the time left before ``deadline`` (loop time: the query's one deadline,
    which the caller's ``asyncio.timeout`` enforces; all but :data:`RETRY_RESERVE` of it), or
    when ``busy`` says how long to wait for a first attempt still running."""
    for number in range(1, attempts + 1):
        last = number == attempts
        try:
            share = _share(last, deadline, min_retry_secs)
            if share is None:
                value = await attempt()
            else:
                async with asyncio.timeout(share) as scope:
                    value = await attempt()
        except TimeoutError:
            if last or share is None or not scope.expired():
                raise
            log.info("a paid call took its share of the deadline; retrying with its key")
            continue
        except Exception as exc:
            if last or not lost(exc):
                raise
            log.info("a paid call's answer was lost in flight; retrying with its key")
            continue
        wait = busy(value)
        if wait is None or last:
            return Retried(value, number)
        log.info("the seller still runs the first attempt; retrying with its key")
        await asyncio.sleep(min(wait, MAX_BUSY_WAIT_SECS))
    raise AssertionError("unreachable")  # pragma: no cover


def _share(last: bool, deadline: float | None, min_retry: float) -> float | None:
    """The time this attempt may take: ``None`` (the caller's deadline) for the last attempt,
    without a deadline, or with too little time left to retry (under ``2 × min_retry``); else
    what is left but the reserve (:data:`RETRY_RESERVE` of it, at least ``min_retry``)."""
    if last or deadline is None:
        return None
    left = deadline - asyncio.get_running_loop().time()
    if left < 2 * min_retry:
        return None
    return left - max(left * RETRY_RESERVE, min_retry)


def retry_after(status: int, headers: dict[str, str]) -> float | None:
    """For a 409 (a first attempt still running): its ``Retry-After`` in seconds (1 when it
    names none); ``None`` for any other status."""
    if status != 409:
        return None
    try:
        return max(float(headers.get("retry-after", "1")), 0.0)
    except ValueError:
        return 1.0
