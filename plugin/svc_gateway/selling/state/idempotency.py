"""Idempotency keys: the answer a paid request bought, kept under the key its buyer sent, so a
retry (after a timeout, a dropped connection, an answer lost in flight) gets it back instead of
paying again.

A key is scoped to its payer (the flow names the scope: a digest of the payer and the key), and
bound to one request (its *fingerprint*: a digest of method, route and body). A scope is in one
of two states: *running* (the first request is being sold; a lease bounds it, so a replica that
dies frees it) and *done* (the answer and its receipt, kept ``ttl`` seconds). Only answers that
were settled, or whose settle is owed in the settle queue, are kept; a refused or failed
request abandons its scope, so its retry is judged afresh.

:class:`MemoryIdempotency` is the in-process default (bounded in entries); the Redis one
(:mod:`.redis_idempotency`) is used with ``stateUrl`` so a retry on another replica is answered
the same. Nothing here holds a token: the token that paid is kept as a SHA-256 digest.
"""

from __future__ import annotations

import base64
import enum
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cachetools import TLRUCache

from ..handlers import Answer

#: how long a kept answer is replayed (24 h)
TTL_SECS = 24 * 3600.0
#: kept answers at most (in-process; the oldest goes first)
MAX_ENTRIES = 4096
#: the largest answer body kept; a larger one is replaced by its receipt and a note
MAX_ANSWER_BYTES = 64 * 1024
#: the longest an idempotency key may be (ACP and Stripe: 255)
MAX_KEY_CHARS = 255
#: the x402 extension that carries a key in the payment (x402's ``payment-identifier``)
PAYMENT_IDENTIFIER = "payment-identifier"
#: the key in an MCP call's ``_meta`` and an A2A message's ``metadata``
IDEMPOTENCY_META = "x402/idempotency-key"


def meta_key(meta: object) -> str | None:
    """``meta["x402/idempotency-key"]`` when it is a non-empty string (the flow checks it)."""
    key = meta.get(IDEMPOTENCY_META) if isinstance(meta, dict) else None
    return key if isinstance(key, str) and key else None


class State(enum.Enum):
    NEW = "new"  # nobody holds the scope: this request runs (and must finish or abandon)
    RUNNING = "running"  # the first request with this key is still being sold
    REUSED = "reused"  # the key was used for another request
    DONE = "done"  # the answer it bought is kept


def advertised() -> dict[str, Any]:
    """What the 402's ``extensions`` say of idempotency (x402's ``payment-identifier``
    extension's shape: supported, and optional)."""
    return {
        PAYMENT_IDENTIFIER: {
            "info": {"required": False},
            "schema": {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "required": {"type": "boolean"},
                    "id": {"type": "string", "minLength": 16, "maxLength": 128},
                },
                "required": ["required"],
            },
        }
    }


@dataclass(frozen=True, slots=True)
class Kept:
    """What a settled request bought: its answer (with the ``payment-response`` receipt in its
    headers), the receipt, and the digest of the token that paid."""

    answer: Answer
    receipt: dict[str, Any] | None
    token: str

    def to_json(self) -> str:
        answer = self.answer
        return json.dumps(
            {
                "status": answer.status,
                "body": base64.b64encode(answer.body).decode(),
                "type": answer.content_type,
                "headers": [list(pair) for pair in answer.headers],
                "receipt": self.receipt,
                "token": self.token,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Kept:
        data = json.loads(text)
        headers = tuple((str(name), str(value)) for name, value in data["headers"])
        answer = Answer(
            int(data["status"]), base64.b64decode(data["body"]), str(data["type"]), headers
        )
        return cls(answer, data.get("receipt"), str(data["token"]))


@dataclass(frozen=True, slots=True)
class Begun:
    """What :meth:`IdempotencyStore.begin` found: ``state``; ``lease`` names this request's hold
    on a NEW scope (finish and abandon take it); ``kept`` the answer of a DONE one."""

    state: State
    lease: str = ""
    kept: Kept | None = None


def new_lease() -> str:
    return secrets.token_hex(8)


@dataclass(slots=True)
class _Entry:
    fingerprint: str
    lease: str
    kept: Kept | None
    expires: float


class MemoryIdempotency:
    """In this process: at most ``max_entries`` scopes (the least recently used go first),
    each kept ``ttl`` seconds once done, ``lease`` seconds while running."""

    def __init__(
        self,
        *,
        ttl: float = TTL_SECS,
        lease: float = 60.0,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.lease = lease
        self._clock = clock
        self._entries: TLRUCache[str, _Entry] = TLRUCache(
            maxsize=max_entries, ttu=lambda _key, entry, _now: entry.expires, timer=clock
        )

    def __repr__(self) -> str:
        return f"MemoryIdempotency(entries={len(self._entries)})"

    async def begin(self, scope: str, fingerprint: str) -> Begun:
        entry = self._entries.get(scope)
        if entry is None:
            lease = new_lease()
            self._entries[scope] = _Entry(fingerprint, lease, None, self._clock() + self.lease)
            return Begun(State.NEW, lease)
        if entry.fingerprint != fingerprint:
            return Begun(State.REUSED)
        if entry.kept is None:
            return Begun(State.RUNNING)
        return Begun(State.DONE, kept=entry.kept)

    async def finish(self, scope: str, lease: str, kept: Kept) -> None:
        entry = self._entries.get(scope)
        if entry is not None and entry.lease == lease:
            self._entries[scope] = _Entry(entry.fingerprint, lease, kept, self._clock() + self.ttl)

    async def abandon(self, scope: str, lease: str) -> None:
        entry = self._entries.get(scope)
        if entry is not None and entry.lease == lease and entry.kept is None:
            del self._entries[scope]

    async def aclose(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
