"""Settles owed and the builder's counters, shared by several replicas through Redis.

The settle queue is three keys: a hash ``agentRequestId`` → entry (JSON; it holds access
tokens, so Redis must be as private as the 0600 file it replaces), a sorted set ordering the
entries by the time they were queued, and a sorted set of leases. ``claim`` leases entries to
this replica for ``lease_secs`` in one script; an entry stays until ``remove`` (after its
settle succeeded or was given up), so a replica that dies mid-retry only delays it: another
claims it when the lease expires and settles it with the same ``agentRequestId`` (settle is
idempotent on it). While Redis is unreachable, new entries go to this replica's local spool
(the settle journal at ``settleQueuePath``, locked to this process) and are pushed once Redis
answers again; removals wait in memory the same way.

Stats: each replica adds what its :class:`~.stats.PaidStats` counted since the last push to
one Redis hash (``HINCRBY``, about once a second and at shutdown); :meth:`SharedStats.totals`
reads the sum over every replica.

Several sellers may share one Redis: every key (book, settle queue, stats) starts with
``svc:<owner>:``, the address of the account whose key settles (the plans' owner,
:func:`seller_prefix`). A replica sees and claims only its own seller's entries, so it never
leases a settle it cannot make; its counters are its seller's alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from ...config import PluginConfig
from ...redact import get_logger
from ...service.seller import SellerSettings
from .book import BalanceRead
from .redis_batch import Prefix, key_prefix
from .redis_book import RedisAdmissionBook
from .redis_idempotency import RedisIdempotency
from .redis_packing import pack_with_hiredis
from .settle_journal import SettleJournal
from .settle_queue import MAX_AGE_SECS, MAX_ENTRIES, PendingSettle
from .shared import StateUnavailable, claim_ttl_secs, describe_state_url
from .stats import PaidStats

log = get_logger("svc_gateway.paid")

#: how often a replica adds its counters to the shared ones
STATS_PUSH_SECS = 1.0
#: Redis calls that take longer fail (admission then answers 503)
SOCKET_TIMEOUT_SECS = 2.0
#: queue entries looked at per claim (leased ones are skipped)
CLAIM_SCAN = 1000

ADD = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local evicted = {}
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    table.insert(evicted, id)
  end
end
return evicted
"""

CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[3]) - 1)) do
  local leased = redis.call('ZSCORE', KEYS[3], id)
  if not leased or tonumber(leased) <= now then
    local data = redis.call('HGET', KEYS[1], id)
    if data then
      redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), id)
      table.insert(out, data)
      if #out >= limit then break end
    else
      redis.call('ZREM', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
    end
  end
end
return out
"""


class RedisSettleStore:
    """:class:`~.state.SettleStore` over Redis, with a local spool for outages."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        where: str,
        prefix: Prefix = "svc:",
        spool: Path,
        lease_secs: float,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self._redis = client
        self.where = where
        self.spool_path = spool
        self.spool: SettleJournal | None = None  # opened (and locked) on first use
        self._opening = asyncio.Lock()
        self.lease_secs = lease_secs
        self.max_entries = max_entries
        self.prefix = prefix
        self._add = client.register_script(ADD)
        self._claim = client.register_script(CLAIM)
        self._removals: set[str] = set()
        self._last_count = 0

    def __repr__(self) -> str:
        spooled = len(self.spool) if self.spool is not None else 0
        return f"RedisSettleStore(where={self.where!r}, spooled={spooled})"

    def _keys(self) -> list[str]:
        """Entries hash, order set, lease set, in this seller's namespace (StateUnavailable
        while it is not known: the local spool keeps what comes meanwhile)."""
        prefix = key_prefix(self.prefix, self.where)
        return [prefix + "settle:entries", prefix + "settle:order", prefix + "settle:lease"]

    async def add(self, entry: PendingSettle) -> list[str]:
        self._removals.discard(entry.request_id)
        try:
            await self._sync()
            return await self._push(entry)
        except StateUnavailable as exc:
            evicted = await (await self._local()).add(entry)
            log.warning(
                "could not queue the settle %s in Redis (%s); kept in %s until Redis is back",
                entry.request_id,
                exc,
                self.spool_path,
            )
            return evicted

    async def remove(self, request_id: str) -> None:
        await (await self._local()).remove(request_id)
        self._removals.add(request_id)
        try:
            await self._sync()
        except StateUnavailable as exc:
            log.warning("could not remove the settle %s from Redis (%s); retried", request_id, exc)

    async def claim(self, limit: int = 100) -> list[PendingSettle]:
        """Entries leased to this replica (oldest first); while Redis is unreachable, the
        local spool's (no other replica knows them)."""
        try:
            await self._sync()
            raw = await self._run(
                self._claim(
                    keys=self._keys(), args=[limit, round(self.lease_secs * 1000), CLAIM_SCAN]
                )
            )
        except StateUnavailable:
            return await (await self._local()).claim(limit)
        return await self._decode(raw)

    async def entries(self) -> list[PendingSettle]:
        try:
            await self._sync()
            keys = self._keys()
            ids = await self._run(self._redis.zrange(keys[1], 0, -1))
            raw = await self._run(self._redis.hmget(keys[0], ids)) if ids else []
        except StateUnavailable:
            return await (await self._local()).entries()
        found = await self._decode([item for item in raw if item is not None])
        return [*await (await self._local()).entries(), *found]

    async def count(self) -> int:
        """Entries owed (Redis and the local spool); the last count Redis gave while it is
        unreachable."""
        with contextlib.suppress(StateUnavailable):
            await self._sync()
            self._last_count = int(await self._run(self._redis.zcard(self._keys()[1])))
        return self._last_count + len(await self._local())

    async def aclose(self) -> None:
        with contextlib.suppress(StateUnavailable):
            await self._sync()
        spool = await self._local()
        self.spool = None
        if len(spool) or self._removals:
            log.warning(
                "%d settle(s) stay in the local spool %s until Redis at %s is back",
                len(spool),
                self.spool_path,
                self.where,
            )
        await spool.aclose()

    async def _push(self, entry: PendingSettle) -> list[str]:
        data = json.dumps(asdict(entry), separators=(",", ":"))
        args: list[str | float] = [entry.request_id, data, entry.queued_at, self.max_entries]
        evicted = await self._run(self._add(keys=self._keys(), args=args))
        dropped = [_text(item) for item in evicted]
        for request_id in dropped:
            log.error("dropped the unsettled request %s: the settle queue is full", request_id)
        return dropped

    async def _sync(self) -> None:
        """Push what the spool kept and the removals that waited, now that Redis answers."""
        spool = await self._local()
        for entry in await spool.entries():
            await self._push(entry)
            await spool.remove(entry.request_id)
        if self._removals:
            removals = sorted(self._removals)
            keys = self._keys()
            pipe = self._redis.pipeline(transaction=True)
            pipe.hdel(keys[0], *removals)
            pipe.zrem(keys[1], *removals)
            pipe.zrem(keys[2], *removals)
            await self._run(pipe.execute())
            self._removals.difference_update(removals)

    async def _local(self) -> SettleJournal:
        """This replica's spool (the settle journal at ``settleQueuePath``), opened once: it
        holds what Redis could not take, and what a previous run left there."""
        if self.spool is None:
            async with self._opening:
                if self.spool is None:
                    self.spool = await SettleJournal.open(self.spool_path)
        return self.spool

    async def _decode(self, raw: list[Any]) -> list[PendingSettle]:
        entries = []
        for item in raw:
            try:
                data = json.loads(_text(item))
            except ValueError:
                data = None
            entry = PendingSettle.from_json(data)
            if entry is None:
                log.error("skipped an unreadable entry of the shared settle queue")
                continue
            entries.append(entry)  # (removals waiting were applied before reading)
        return entries

    async def _run(self, call: Any) -> Any:
        try:
            return await call
        except (RedisError, OSError) as exc:
            raise StateUnavailable(self.where, exc) from None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_COUNTERS = ("settle_queue", "receipts")  # a gauge and a list: not summed over replicas


class SharedStats:
    """Every replica's :class:`~.stats.PaidStats` counters, summed in one Redis hash."""

    def __init__(self, client: aioredis.Redis, *, where: str, prefix: Prefix = "svc:") -> None:
        self._redis = client
        self.where = where
        self.prefix = prefix
        self._pushed: dict[str, int] = {}
        # one push at a time: two pushes computing their deltas from the same baseline (the
        # periodic one and the last one at close) would add the same counts twice
        self._lock = asyncio.Lock()

    async def push(self, stats: PaidStats) -> None:
        """Add what ``stats`` counted since the last successful push."""
        async with self._lock:
            now = {
                f.name: int(getattr(stats, f.name))
                for f in fields(stats)
                if f.name not in _COUNTERS
            }
            deltas = {k: v - self._pushed.get(k, 0) for k, v in now.items()}
            deltas = {k: v for k, v in deltas.items() if v}
            if not deltas:
                return
            key = self.key()
            pipe = self._redis.pipeline(transaction=True)
            for name, delta in deltas.items():
                pipe.hincrby(key, name, delta)
            try:
                await pipe.execute()
            except (RedisError, OSError) as exc:
                raise StateUnavailable(self.where, exc) from None
            self._pushed = now

    def key(self) -> str:
        """This seller's counters hash (StateUnavailable while the seller is not known)."""
        return key_prefix(self.prefix, self.where) + "stats"

    async def totals(self) -> dict[str, int]:
        """The counters summed over every replica of this seller (as last pushed)."""
        key = self.key()
        try:
            raw = await self._redis.hgetall(key)
        except (RedisError, OSError) as exc:
            raise StateUnavailable(self.where, exc) from None
        return {_text(k): int(v) for k, v in raw.items()}


def seller_prefix(owner: str | None) -> str | None:
    """The key prefix of the seller whose account is ``owner`` (``None``: not known yet)."""
    return f"svc:{owner.lower()}:" if owner else None


def connect_client(url: str) -> aioredis.Redis:
    """A client for ``url``: bounded waits, and one immediate retry on a broken connection
    (after Redis restarts, a pooled connection fails once). A script sent twice that way is
    safe: an extra claim expires, a release is idempotent, a settle subtracted twice only
    underestimates the balance until the next read."""
    client = aioredis.Redis.from_url(
        url,
        socket_timeout=SOCKET_TIMEOUT_SECS,
        socket_connect_timeout=SOCKET_TIMEOUT_SECS,
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[RedisConnectionError],
    )
    pack_with_hiredis(client)  # the paid path's scripts, packed in C
    return client


class RedisState:
    """One replica's connection to the shared state: the book, the settle store, the stats,
    the idempotency keys."""

    def __init__(
        self,
        client: aioredis.Redis,
        book: RedisAdmissionBook,
        store: RedisSettleStore,
        stats: SharedStats,
        idempotency: RedisIdempotency | None = None,
    ) -> None:
        self.client = client
        self.book = book
        self.store = store
        self.stats = stats
        self.idempotency = idempotency or RedisIdempotency(client, where=book.where)
        self._pusher: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"RedisState(where={self.where!r})"

    @property
    def where(self) -> str:
        """``host:port/db`` (never a password)."""
        return self.book.where

    @classmethod
    def connect(
        cls,
        url: str,
        config: PluginConfig | SellerSettings,
        read_balance: BalanceRead,
        spool: Path,
        *,
        owner: Callable[[], str | None],
    ) -> RedisState:
        """Clients connect lazily, so this makes no call; each replica needs its own spool.
        ``owner`` names the seller's account (the plans' owner, whose key settles; ``None``
        while nobody is logged in): every key lives in its namespace."""
        where = describe_state_url(url)
        client = connect_client(url)
        ttl = claim_ttl_secs(config)

        named: list[str | None] = [None, None]  # the last owner and its prefix

        def prefix() -> str | None:
            who = owner()
            if who != named[0]:
                named[:] = [who, seller_prefix(who)]
            return named[1]

        book = RedisAdmissionBook(
            client,
            read_balance,
            where=where,
            prefix=prefix,
            claim_ttl_secs=ttl,
            owed_ttl_secs=MAX_AGE_SECS,
        )
        lease = 2 * config.paid_budget_secs + 5.0
        store = RedisSettleStore(client, where=where, prefix=prefix, spool=spool, lease_secs=lease)
        keys = RedisIdempotency(
            client,
            where=where,
            prefix=prefix,
            ttl=config.idempotency_ttl_secs,
            lease=ttl,
        )
        return cls(client, book, store, SharedStats(client, where=where, prefix=prefix), keys)

    def share(self, stats: PaidStats, every: float = STATS_PUSH_SECS) -> None:
        """Push ``stats`` to the shared counters every ``every`` seconds (plugin loop)."""
        self._pusher = asyncio.get_running_loop().create_task(self._push_loop(stats, every))

    async def _push_loop(self, stats: PaidStats, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            with contextlib.suppress(StateUnavailable):
                # shielded: a push cancelled by aclose() after Redis applied it, but before its
                # baseline moved, would be counted again by the last push
                await asyncio.shield(self.stats.push(stats))

    async def aclose(self, stats: PaidStats | None = None) -> None:
        """Stop pushing (a last push of ``stats``) and disconnect; the flow closes the book
        and the store before."""
        pusher, self._pusher = self._pusher, None
        if pusher is not None:
            pusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pusher
        if stats is not None:
            with contextlib.suppress(StateUnavailable):
                await self.stats.push(stats)
        await self.client.aclose()
