"""The admission book shared by several replicas through Redis: one Lua script per decision.

Per (plan, payer) three keys (one hash tag, so a cluster keeps them on one shard): a hash with
the known ``balance``, the credits ``inflight``, ``read_at`` (Redis time, ms; absent when stale),
``loaded``, ``burned`` (credits settled so far) and ``gen`` (bumped by a refused settle); a sorted
set of claims scored by their expiry; a hash of the claims' amounts. Every script first frees
the claims that expired (a replica that died mid-request cannot lock a payer out), then decides
on Redis's own clock, so replicas with skewed clocks agree.

The semantics are :class:`~.billing.CreditBook`'s: admit when ``balance - inflight >= amount``,
or, with nothing in flight for the payer, on verify's word (automatic top-up: one request at a
time); the balance is read from the service once (the script answers "read first"; this process
then reads it once for all its waiters and sends it back) and kept from settle receipts; a read
that overlaps a settle is corrected by what was burned meanwhile, and one that overlaps a
refused settle is discarded; re-read after :data:`~.billing.BALANCE_TTL_SECS` with nothing in
flight, after a receipt shows more than the book knew, or when verify saw enough credits and the
book is short.

A Redis outage fails admission closed (:class:`~.shared.StateUnavailable`, a 503 before
the handler); a close (settled, release, refused) that cannot reach Redis is kept here and sent
once Redis answers again (until then the claim's expiry bounds what it holds); so is a restore.

Every key starts with the seller's prefix (:class:`~.redis_store.RedisState` names it after the
plans' owner), so sellers sharing one Redis never share a key; it is named when a script is
sent (a prefix not known yet, nobody logged in, counts as an outage).
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections import deque
from collections.abc import Awaitable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ...redact import get_logger
from .book import BALANCE_TTL_SECS, Admission, BalanceRead, Refusal, read_once
from .redis_batch import Prefix, ScriptBatch, key_prefix
from .shared import StateUnavailable

log = get_logger("svc_gateway.paid")

#: an account untouched this long (and holding no claim) is forgotten by Redis
IDLE_SECS = 24 * 3600.0
#: updates kept while Redis is unreachable; beyond it the oldest are dropped (claims expire)
MAX_BACKLOG = 10_000
#: finished reads remembered (each with its time), so admissions that asked before it use it
MAX_RECENT = 1000
#: reads of one admission before it decides on what it has (reads overlapping refusals)
MAX_READS = 2
#: (prefix, plan, payer) whose key names are kept; beyond it they are named afresh
KEYS_KEPT = 4096

_LIB = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function purge(acct, claims, amounts, now)
  local expired = redis.call('ZRANGEBYSCORE', claims, '-inf', now)
  if #expired == 0 then return end
  local freed = 0
  for _, c in ipairs(expired) do
    freed = freed + tonumber(redis.call('HGET', amounts, c) or '0')
    redis.call('HDEL', amounts, c)
  end
  redis.call('ZREMRANGEBYSCORE', claims, '-inf', now)
  local inflight = tonumber(redis.call('HGET', acct, 'inflight') or '0') - freed
  if inflight < 0 then inflight = 0 end
  redis.call('HSET', acct, 'inflight', inflight)
end
local function keep(acct, claims, amounts, now, idle)
  local ttl = idle
  local last = redis.call('ZRANGE', claims, -1, -1, 'WITHSCORES')
  if #last == 2 and tonumber(last[2]) - now + 1000 > ttl then
    ttl = tonumber(last[2]) - now + 1000
  end
  redis.call('PEXPIRE', acct, ttl)
  redis.call('PEXPIRE', claims, ttl)
  redis.call('PEXPIRE', amounts, ttl)
end
local acct, claims, amounts = KEYS[1], KEYS[2], KEYS[3]
local now = now_ms()
purge(acct, claims, amounts, now)
local h = redis.call('HMGET', acct, 'balance', 'inflight', 'read_at', 'loaded', 'burned', 'gen')
local balance = tonumber(h[1] or '0')
local inflight = tonumber(h[2] or '0')
local read_at = h[3] and tonumber(h[3]) or nil
local loaded = h[4] == '1'
local burned = tonumber(h[5] or '0')
local gen = tonumber(h[6] or '0')
"""

#: ARGV: amount, claim, claim_ms, balance_ttl_ms, idle_ms, fresh, burned0, gen0, force,
#: verified ('' not reported) → {1, available after} admitted · {2, ...} admitted on verify's
#: word (top-up) · {-1, available} refused · {0, burned, gen} read the balance first
ADMIT = (
    _LIB
    + """
local amount = tonumber(ARGV[1])
local fresh = ARGV[6]
local force = ARGV[9] == '1'
if fresh ~= '' and gen == tonumber(ARGV[8]) then
  balance = tonumber(fresh) - (burned - tonumber(ARGV[7]))
  loaded = true
  redis.call('HSET', acct, 'balance', balance, 'loaded', 1, 'read_at', now)
elseif not force then
  local stale = read_at == nil or now - read_at >= tonumber(ARGV[4])
  if not loaded or (inflight == 0 and stale) then return {0, burned, gen} end
end
local status = 1
if balance - inflight < amount and inflight == 0 then
  if ARGV[10] == '' or tonumber(ARGV[10]) < amount then
    status = 2
  elseif fresh == '' and not force then
    return {0, burned, gen}
  end
end
if status == 1 and balance - inflight < amount then
  keep(acct, claims, amounts, now, tonumber(ARGV[5]))
  return {-1, balance - inflight}
end
redis.call('ZADD', claims, now + tonumber(ARGV[3]), ARGV[2])
redis.call('HSET', amounts, ARGV[2], amount)
redis.call('HSET', acct, 'inflight', inflight + amount)
keep(acct, claims, amounts, now, tonumber(ARGV[5]))
return {status, balance - inflight - amount}
"""
)

#: ARGV: mode (settled | release | refused), claim, redeemed, remaining ('' unknown), idle_ms
CLOSE = (
    _LIB
    + """
local amount = redis.call('HGET', amounts, ARGV[2])
if amount then
  inflight = inflight - tonumber(amount)
  if inflight < 0 then inflight = 0 end
  redis.call('HDEL', amounts, ARGV[2])
  redis.call('ZREM', claims, ARGV[2])
  redis.call('HSET', acct, 'inflight', inflight)
end
if ARGV[1] == 'settled' then
  balance = balance - tonumber(ARGV[3])
  if ARGV[4] ~= '' and tonumber(ARGV[4]) < balance - inflight then
    balance = tonumber(ARGV[4]) + inflight
  elseif ARGV[4] ~= '' and tonumber(ARGV[4]) > balance and inflight == 0 then
    redis.call('HDEL', acct, 'read_at')  -- more than we knew (a top-up): read it next time
  end
  redis.call('HSET', acct, 'balance', balance, 'burned', burned + tonumber(ARGV[3]))
elseif ARGV[1] == 'refused' then
  redis.call('HSET', acct, 'balance', inflight, 'gen', gen + 1)
  redis.call('HDEL', acct, 'read_at')
end
keep(acct, claims, amounts, now, tonumber(ARGV[5]))
return inflight
"""
)

#: ARGV: amount, claim, claim_ms, idle_ms → 1 counted now, 0 already counted (expiry extended)
RESTORE = (
    _LIB
    + """
if redis.call('HEXISTS', amounts, ARGV[2]) == 1 then
  redis.call('ZADD', claims, 'GT', now + tonumber(ARGV[3]), ARGV[2])
  keep(acct, claims, amounts, now, tonumber(ARGV[4]))
  return 0
end
redis.call('ZADD', claims, now + tonumber(ARGV[3]), ARGV[2])
redis.call('HSET', amounts, ARGV[2], ARGV[1])
redis.call('HSET', acct, 'inflight', inflight + tonumber(ARGV[1]))
keep(acct, claims, amounts, now, tonumber(ARGV[4]))
return 1
"""
)

_Read = tuple[int, int, int]  # (balance read, burned before the read, gen before the read)


def _ms(secs: float) -> int:
    return max(1, round(secs * 1000))


class RedisAdmissionBook:
    """:class:`~.state.AdmissionBook` over Redis, shared by every replica on one ``stateUrl``."""

    def __init__(
        self,
        client: aioredis.Redis,
        read_balance: BalanceRead,
        *,
        where: str,
        prefix: Prefix = "svc:",
        claim_ttl_secs: float,
        owed_ttl_secs: float,
        balance_ttl_secs: float = BALANCE_TTL_SECS,
        idle_secs: float = IDLE_SECS,
        max_backlog: int = MAX_BACKLOG,
    ) -> None:
        self._redis = client
        self._read_balance = read_balance
        self.where = where  # host:port/db, never a password
        self.prefix = prefix
        self.claim_ttl_secs = claim_ttl_secs
        self.owed_ttl_secs = owed_ttl_secs
        self._balance_ttl_ms = _ms(balance_ttl_secs)
        self._idle_ms = _ms(idle_secs)
        self.max_backlog = max_backlog
        self._admit = client.register_script(ADMIT)
        self._close = client.register_script(CLOSE)
        self._restore = client.register_script(RESTORE)
        self._batch = ScriptBatch(client, where)
        #: claim ids: this book's own 128 random bits, then a count (unique across replicas
        #: and restarts without a random draw per claim)
        self._claim_prefix = secrets.token_hex(16) + "-"
        self._claim_count = itertools.count(1)
        self._keys: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        self._loading: dict[tuple[str, str], asyncio.Future[_Read]] = {}
        self._recent: dict[tuple[str, str], tuple[float, _Read]] = {}
        #: updates kept while Redis is unreachable: (script, plan, payer, args), keys named
        #: when sent
        self._backlog: deque[tuple[Any, str, str, list[Any]]] = deque()
        self._flushing = asyncio.Lock()
        self.reads = 0
        self.dropped_updates = 0

    def __repr__(self) -> str:
        return f"RedisAdmissionBook(where={self.where!r}, backlog={len(self._backlog)})"

    def keys(self, plan_id: str, payer: str) -> tuple[str, str, str]:
        """The account hash, claims set and claims hash of (plan, payer), in this seller's
        namespace (:class:`StateUnavailable` while it is not known); named once per prefix,
        plan and payer (at most :data:`KEYS_KEPT` kept)."""
        prefix = key_prefix(self.prefix, self.where)
        named = self._keys.get((prefix, plan_id, payer))
        if named is None:
            if len(self._keys) >= KEYS_KEPT:
                self._keys.clear()
            base = f"{prefix}acct:{{{plan_id}|{payer.lower()}}}"
            named = self._keys[prefix, plan_id, payer] = (
                base,
                base + ":claims",
                base + ":amounts",
            )
        return named

    async def known(self, plan_id: str, payer: str) -> tuple[int, int] | None:
        """``(balance, in_flight)`` as Redis holds it (expired claims still counted until the
        next script frees them), ``None`` for a payer never read."""
        acct = self.keys(plan_id, payer)[0]
        values = await self._run(self._redis.hmget(acct, "balance", "inflight", "loaded"))
        if values[2] is None:
            return None
        return int(values[0] or 0), int(values[1] or 0)

    async def admit(
        self, plan_id: str, payer: str, amount: int, verified_balance: int | None = None
    ) -> Admission | Refusal:
        """:meth:`~.billing.CreditBook.admit`'s rule, atomically for every replica: admitted
        when ``balance - in_flight >= amount``; short with nothing in flight for the payer:
        admitted when ``verified_balance`` is ``None`` or short too (verify passed through
        top-up), else read again first (once per call); short with credits in flight: refused."""
        key = (plan_id, payer.lower())
        keys = self.keys(*key)
        claim = f"{self._claim_prefix}{next(self._claim_count):x}"
        fresh: _Read | None = None
        loop = asyncio.get_running_loop()
        for attempt in range(MAX_READS + 1):
            asked = loop.time()
            args = [
                amount,
                claim,
                _ms(self.claim_ttl_secs),
                self._balance_ttl_ms,
                self._idle_ms,
                "" if fresh is None else fresh[0],
                0 if fresh is None else fresh[1],
                0 if fresh is None else fresh[2],
                1 if attempt == MAX_READS else 0,
                "" if verified_balance is None else verified_balance,
            ]
            result = await self._script(self._admit, keys, args)
            status = int(result[0])
            if status > 0:
                return Admission(key[0], key[1], amount, claim)
            if status == -1:
                return Refusal(int(result[1]), amount)
            recent = self._recent.get(key)
            if recent is not None and recent[0] >= asked:
                fresh = recent[1]  # a read of this process that finished after we asked
            else:
                fresh = await self._load(key, int(result[1]), int(result[2]))
        raise AssertionError(
            "unreachable: the last attempt is forced to decide"
        )  # pragma: no cover

    async def restore(
        self, plan_id: str, payer: str, amount: int, request_id: str = ""
    ) -> Admission:
        """Count an owed settle as in flight until it settles or ``owed_ttl_secs`` pass; with
        ``request_id`` every replica that restores it names the same claim (counted once).
        Never fails: while Redis is unreachable it is kept and sent first when Redis is back."""
        key = (plan_id, payer.lower())
        claim = f"owed:{request_id}" if request_id else f"owed:{secrets.token_hex(16)}"
        args = [amount, claim, _ms(self.owed_ttl_secs), self._idle_ms]
        await self._later(self._restore, *key, args, "restore")
        return Admission(key[0], key[1], amount, claim)

    async def settled(self, admission: Admission, redeemed: int, remaining: int | None) -> None:
        await self._closing(admission, "settled", redeemed, remaining)

    async def release(self, admission: Admission) -> None:
        await self._closing(admission, "release", 0, None)

    async def refused(self, admission: Admission) -> None:
        await self._closing(admission, "refused", 0, None)

    async def aclose(self) -> None:
        try:
            await self.flush()
        except StateUnavailable:  # only raised with something kept
            log.warning(
                "%d admission update(s) could not reach Redis at %s before shutdown; "
                "the claims they close expire on their own",
                len(self._backlog),
                self.where,
            )
        await self._batch.aclose()

    async def flush(self) -> None:
        """Send the updates kept while Redis was unreachable, oldest first (one flusher)."""
        async with self._flushing:
            while self._backlog:
                script, plan_id, payer, args = self._backlog[0]
                await self._batch.call(script, self.keys(plan_id, payer), args)
                self._backlog.popleft()

    async def _closing(
        self, admission: Admission, mode: str, redeemed: int, remaining: int | None
    ) -> None:
        args: list[Any] = [
            mode,
            admission.claim_id,
            redeemed,
            "" if remaining is None else remaining,
            self._idle_ms,
        ]
        await self._later(self._close, admission.plan_id, admission.payer, args, mode)

    async def _later(
        self, script: Any, plan_id: str, payer: str, args: list[Any], what: str
    ) -> None:
        """Run ``script`` on (plan, payer)'s keys (after what is kept, if anything is); if
        Redis does not answer, keep it for later."""
        try:
            if not self._backlog:
                await self._batch.call(script, self.keys(plan_id, payer), args)
                return
        except StateUnavailable:
            pass
        self._backlog.append((script, plan_id, payer, args))
        if len(self._backlog) > self.max_backlog:
            self._backlog.popleft()
            self.dropped_updates += 1
        try:
            await self.flush()
        except StateUnavailable as exc:
            log.warning(
                "could not record a %s admission in Redis (%s); kept and sent when Redis is back",
                what,
                exc,
            )

    async def _load(self, key: tuple[str, str], burned: int, gen: int) -> _Read:
        """Read the balance; this process's concurrent callers for one payer share one read."""

        async def read() -> _Read:
            self.reads += 1
            balance = await self._read_balance(*key)
            if len(self._recent) >= MAX_RECENT:
                self._recent.clear()
            self._recent[key] = (asyncio.get_running_loop().time(), (balance, burned, gen))
            return balance, burned, gen

        return await read_once(self._loading, key, read)

    async def _script(self, script: Any, keys: Sequence[str], args: list[Any]) -> Any:
        if self._backlog:
            await self.flush()
        return await self._batch.call(script, keys, args)

    async def _run(self, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except (RedisError, OSError) as exc:
            raise StateUnavailable(self.where, exc) from None
