"""Mandates shared by replicas (``stateUrl``): one Redis hash per account, one atomic script.

The fields are :mod:`.ledger`'s; every operation is the one Lua script :data:`LEDGER`, so a
mandate typed on one replica is honoured on another, and reservations made on both at once
never spend past it. Loaded only with ``stateUrl`` (the redis extra).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from ..redact import describe_state_url
from ..service.errors import ServiceUnavailable
from .ledger import Reserved, Slot
from .mandates import Mandate

SOCKET_TIMEOUT_SECS = 2.0
KEY = "svc:approvals:{digest}"

#: ARGV[1] names the operation; KEYS[1] is the account's hash.
LEDGER = """
local key = KEYS[1]
local op = ARGV[1]
local function num(v) if v then return tonumber(v) end return 0 end
local function unhold(rid, actual)
  local raw = redis.call('HGET', key, 'r:' .. rid)
  if not raw then return 0 end
  local r = cjson.decode(raw)
  for _, slot in ipairs(r.slots) do
    local suffix = slot[1] .. ':' .. slot[2]
    redis.call('HINCRBY', key, 'h:' .. suffix, -r.amount)
    if actual > 0 then redis.call('HINCRBY', key, 's:' .. suffix, actual) end
  end
  redis.call('HDEL', key, 'r:' .. rid)
  return 1
end
if op == 'put' then
  redis.call('HSET', key, 'm:' .. ARGV[2], ARGV[3])
  return 1
elseif op == 'clear' then
  local n = 0
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == 'm:' then redis.call('HDEL', key, f); n = n + 1 end
  end
  return n
elseif op == 'fields' then
  return redis.call('HGETALL', key)
elseif op == 'finish' then
  return unhold(ARGV[2], tonumber(ARGV[3]))
elseif op == 'reserve' then
  local now = tonumber(ARGV[2])
  local rid = ARGV[3]
  local amount = tonumber(ARGV[4])
  local ttl = tonumber(ARGV[5])
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == 'r:' then
      local r = cjson.decode(redis.call('HGET', key, f))
      if r.exp <= now then unhold(string.sub(f, 3), r.amount) end
    end
  end
  local best = nil
  local slots = {}
  local n = (#ARGV - 5) / 4
  for j = 0, n - 1 do
    local id = ARGV[6 + 4 * j]
    local win = ARGV[7 + 4 * j]
    local limit = tonumber(ARGV[8 + 4 * j])
    if ARGV[9 + 4 * j] == '1' and redis.call('HEXISTS', key, 'm:' .. id) == 0 then
      return {0, 0, id}
    end
    local suffix = id .. ':' .. win
    local left = limit - num(redis.call('HGET', key, 's:' .. suffix))
      - num(redis.call('HGET', key, 'h:' .. suffix))
    if amount > left then return {0, left, id} end
    if best == nil or left - amount < best then best = left - amount end
    table.insert(slots, {id, win})
  end
  for _, slot in ipairs(slots) do
    redis.call('HINCRBY', key, 'h:' .. slot[1] .. ':' .. slot[2], amount)
  end
  local held = cjson.encode({amount = amount, exp = now + ttl, slots = slots})
  redis.call('HSET', key, 'r:' .. rid, held)
  return {1, best or 0, ''}
end
return redis.error_reply('unknown ledger operation')
"""


class LedgerUnavailable(ServiceUnavailable):
    """The shared Redis did not answer: nothing is paid without a mandate it can check."""

    default_hint = "The gateway's shared state store is unreachable; retry in a few seconds."

    def __init__(self, where: str, exc: BaseException) -> None:
        super().__init__(
            f"the shared state store at {where} did not answer ({type(exc).__name__})",
            code="state_unavailable",
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisLedger:
    """:class:`~.ledger.MandateLedger` in a shared Redis."""

    def __init__(self, url: str) -> None:
        self.where = describe_state_url(url)
        self._redis = aioredis.Redis.from_url(
            url,
            socket_timeout=SOCKET_TIMEOUT_SECS,
            socket_connect_timeout=SOCKET_TIMEOUT_SECS,
            retry=Retry(NoBackoff(), 1),
            retry_on_error=[RedisConnectionError],
        )
        self._script = self._redis.register_script(LEDGER)

    @staticmethod
    def key(account: str) -> str:
        digest = hashlib.sha256(account.encode()).hexdigest()[:32]
        return KEY.format(digest=digest)

    async def _run(self, account: str, *args: str | int) -> Any:
        try:
            return await self._script(keys=[self.key(account)], args=list(args))
        except RedisError as exc:
            raise LedgerUnavailable(self.where, exc) from None

    async def put(self, account: str, mandate: Mandate) -> None:

        await self._run(account, "put", mandate.id, json.dumps(mandate.to_json()))

    async def clear(self, account: str) -> int:
        return int(await self._run(account, "clear"))

    async def fields(self, account: str) -> dict[str, str]:
        flat = await self._run(account, "fields")
        return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}

    async def reserve(
        self, account: str, rid: str, amount: int, slots: list[Slot], ttl: float, now: float
    ) -> Reserved:
        args: list[str | int] = ["reserve", int(now), rid, amount, int(ttl) + 1]
        for slot in slots:
            args += [slot.mandate_id, slot.window, slot.limit_micro, int(slot.must_exist)]
        ok, left, by = await self._run(account, *args)
        return Reserved(bool(ok), int(left), _text(by))

    async def finish(self, account: str, rid: str, actual: int) -> None:
        await self._run(account, "finish", rid, actual)

    async def aclose(self) -> None:
        await self._redis.aclose()
