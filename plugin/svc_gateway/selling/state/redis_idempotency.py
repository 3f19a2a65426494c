"""Idempotency keys shared by several replicas through Redis (:mod:`.idempotency`).

Each scope is one hash ``<prefix>idem:<scope>`` (fields ``fp``, ``lease``, and ``kept`` once
done) whose key expires: after the lease while running, after the time to live once done.
``begin`` is one script (atomic: of concurrent retries on any replica exactly one runs);
``finish`` and ``abandon`` act only while the caller's lease still holds the scope. Redis
bounds the count (its ``maxmemory``); each kept answer is bounded in size by the flow.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from .idempotency import TTL_SECS, Begun, Kept, State, new_lease
from .redis_batch import Prefix, key_prefix
from .shared import StateUnavailable

BEGIN = """
local found = redis.call('HMGET', KEYS[1], 'fp', 'kept')
if not found[1] then
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'lease', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'new'}
end
if found[1] ~= ARGV[1] then return {'reused'} end
if not found[2] then return {'running'} end
return {'done', found[2]}
"""

FINISH = """
if redis.call('HGET', KEYS[1], 'lease') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'kept', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

ABANDON = """
local found = redis.call('HMGET', KEYS[1], 'lease', 'kept')
if found[1] == ARGV[1] and not found[2] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisIdempotency:
    """:class:`~.protocols.IdempotencyStore` over Redis; fails closed
    (:class:`~.shared.StateUnavailable`, the flow answers 503) when Redis does not answer."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        where: str,
        prefix: Prefix = "svc:",
        ttl: float = TTL_SECS,
        lease: float = 60.0,
    ) -> None:
        self.where = where
        self.prefix = prefix
        self.ttl = ttl
        self.lease = lease
        self._begin = client.register_script(BEGIN)
        self._finish = client.register_script(FINISH)
        self._abandon = client.register_script(ABANDON)

    def __repr__(self) -> str:
        return f"RedisIdempotency(where={self.where!r})"

    def _key(self, scope: str) -> str:
        return key_prefix(self.prefix, self.where) + "idem:" + scope

    async def begin(self, scope: str, fingerprint: str) -> Begun:
        lease = new_lease()
        found = await self._run(
            self._begin(keys=[self._key(scope)], args=[fingerprint, lease, int(self.lease * 1000)])
        )
        state = State(_text(found[0]))
        if state is State.NEW:
            return Begun(state, lease)
        if state is State.DONE:
            return Begun(state, kept=Kept.from_json(found[1]))
        return Begun(state)

    async def finish(self, scope: str, lease: str, kept: Kept) -> None:
        await self._run(
            self._finish(
                keys=[self._key(scope)], args=[lease, kept.to_json(), int(self.ttl * 1000)]
            )
        )

    async def abandon(self, scope: str, lease: str) -> None:
        await self._run(self._abandon(keys=[self._key(scope)], args=[lease]))

    async def aclose(self) -> None:
        """The client is the shared state's (it closes it)."""

    async def _run(self, call: Any) -> Any:
        try:
            return await call
        except (RedisError, OSError) as exc:
            raise StateUnavailable(self.where, exc) from None
