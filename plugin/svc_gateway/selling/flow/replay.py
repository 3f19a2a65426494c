"""Retry-safe single-use tokens: the answer a settled v3 token paid for, replayed to its retry.

A v3 access token (its authorization carries a ``nonce``) settles once. A buyer whose
connection dropped after paying retries with the same token; settling again would fail
(``BCK.X402.0059``) and the answer would be withheld although it was paid. The gate
therefore remembers, for a bounded time and number of entries, the answer each settled
single-use token paid for, keyed by a digest of the token and the route, and replays it when
the same token asks the same route with the same body. The same token with another body is
refused: it paid for one request, not for any. Reusable (v2) tokens are never replayed: a
repeated request with one of those is a new purchase.

Nothing in this cache holds a token: keys are SHA-256 digests.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import Cache, TTLCache

from ...encoding import decode_access_token, token_authorization
from ..handlers import Answer

REPLAY_TTL_SECS = 600.0
REPLAY_ENTRIES = 2048


def is_single_use(token: str) -> bool:
    """A v3 token: its authorization carries a ``nonce`` (never raises)."""
    decoded = decode_access_token(token)
    if decoded is None:
        return False
    nonce = token_authorization(decoded).get("nonce")
    return isinstance(nonce, str) and bool(nonce)


def digest(*parts: str | bytes) -> str:
    """SHA-256 (hex) of the parts, each followed by a NUL byte (strings as UTF-8)."""
    if len(parts) == 1 and type(parts[0]) is str:  # a body or a name: one update, not two
        return hashlib.sha256(parts[0].encode() + b"\x00").hexdigest()
    encoded = [part.encode() if isinstance(part, str) else part for part in parts]
    return hashlib.sha256(b"\x00".join(encoded) + b"\x00").hexdigest()


@dataclass(frozen=True, slots=True)
class Paid:
    """What one settled single-use token bought: the request's body digest and the answer
    (with its receipt)."""

    body: str
    answer: Answer


class ReplayCache:
    """Bounded in size and time; a miss costs one dict lookup and one token decode."""

    def __init__(
        self,
        *,
        ttl: float = REPLAY_TTL_SECS,
        maxsize: int = REPLAY_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._paid: TTLCache[str, Paid] = TTLCache(maxsize=maxsize, ttl=ttl, timer=clock)
        #: whether the token behind a key is single-use (decoded once per token and route:
        #: a reusable token pays for many requests)
        self._single: dict[str, bool] = {}
        self._maxsize = maxsize
        self.replayed = 0

    @staticmethod
    def key(token: str, route: str) -> str:
        """``digest(token, route)``, in one update."""
        return hashlib.sha256(b"%s\x00%s\x00" % (token.encode(), route.encode())).hexdigest()

    def lookup(self, token: str, route: str) -> Paid | None:
        if not Cache.__len__(self._paid):  # the count as kept (TTLCache's len expires first)
            return None
        return self._paid.get(self.key(token, route))

    def remember(self, token: str, route: str, body: str, answer: Answer) -> None:
        key = self.key(token, route)
        single = self._single.get(key)
        if single is None:
            if len(self._single) >= self._maxsize:
                self._single.clear()
            single = self._single[key] = is_single_use(token)
        if single:
            self._paid[key] = Paid(body, answer)

    def __len__(self) -> int:
        return len(self._paid)
