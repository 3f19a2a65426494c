"""The shared settle queue and stats against a real redis-server: leases, spool, counters."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from svc_gateway.config import load_config
from svc_gateway.selling.state.redis_store import (
    RedisSettleStore,
    RedisState,
    SharedStats,
    connect_client,
    seller_prefix,
)
from svc_gateway.selling.state.settle_journal import SettleJournal, SettleQueueLocked
from svc_gateway.selling.state.settle_queue import PendingSettle
from svc_gateway.selling.state.shared import StateUnavailable
from svc_gateway.selling.state.stats import PaidStats
from tests.support.redis_server import RedisServer

OWNER = "0xB0B0000000000000000000000000000000000001"  # the seller whose namespace is used


def entry(n: int, queued_at: float = 1000.0) -> PendingSettle:
    return PendingSettle(
        request_id=f"req-{n}",
        plan_id="plan-1",
        payer="0xabc",
        amount=n,
        token=f"token-{n}",
        envelope={"x402Version": 2, "accepts": []},
        queued_at=queued_at + n,
    )


class Replicas:
    def __init__(self, server: RedisServer, tmp: Path) -> None:
        self.server = server
        self.tmp = tmp
        self.clients: list[aioredis.Redis] = []
        self.stores: list[RedisSettleStore] = []

    def client(self) -> aioredis.Redis:
        client = connect_client(self.server.url)
        self.clients.append(client)
        return client

    def store(self, name: str, lease_secs: float = 30.0, **kwargs: int) -> RedisSettleStore:
        store = RedisSettleStore(
            self.client(),
            where="test",
            spool=self.tmp / f"{name}-spool.json",
            lease_secs=lease_secs,
            **kwargs,
        )
        self.stores.append(store)
        return store


@pytest.fixture
async def replicas(redis_server: RedisServer, tmp_path: Path) -> AsyncIterator[Replicas]:
    made = Replicas(redis_server, tmp_path)
    yield made
    for store in made.stores:
        if store.spool is not None:
            await store.spool.aclose()
    for client in made.clients:
        await client.aclose()


async def test_a_claimed_entry_is_leased_to_one_replica_until_removed(replicas: Replicas) -> None:
    a, b = replicas.store("a"), replicas.store("b")
    await a.add(entry(1))
    await a.add(entry(2))
    claimed = await a.claim()
    assert [e.request_id for e in claimed] == ["req-1", "req-2"]  # oldest first
    assert claimed[0] == entry(1)  # token, envelope and agentRequestId kept as queued
    assert await b.claim() == []  # leased to a
    await a.remove("req-1")
    assert await b.count() == 1
    assert [e.request_id for e in await b.entries()] == ["req-2"]


async def test_a_dead_replicas_lease_expires_and_another_retries(replicas: Replicas) -> None:
    dead, survivor = replicas.store("dead", lease_secs=0.2), replicas.store("survivor")
    await dead.add(entry(1))
    assert [e.request_id for e in await dead.claim()] == ["req-1"]
    assert await survivor.claim() == []
    await asyncio.sleep(0.25)
    again = await survivor.claim()
    assert again == [entry(1)]  # the original agentRequestId, never a new one
    await survivor.remove("req-1")
    assert await dead.count() == 0


async def test_claim_takes_at_most_limit(replicas: Replicas) -> None:
    a, b = replicas.store("a"), replicas.store("b")
    for n in range(1, 6):
        await a.add(entry(n))
    assert [e.request_id for e in await a.claim(limit=2)] == ["req-1", "req-2"]
    assert [e.request_id for e in await b.claim(limit=10)] == ["req-3", "req-4", "req-5"]


async def test_adding_an_entry_again_replaces_it(replicas: Replicas) -> None:
    a = replicas.store("a")
    await a.add(entry(1))
    await a.add(entry(1, queued_at=2000.0))
    assert await a.count() == 1
    assert [e.queued_at for e in await a.entries()] == [2001.0]


async def test_a_full_queue_evicts_the_oldest_and_names_it(replicas: Replicas) -> None:
    a = replicas.store("a", max_entries=2)
    assert await a.add(entry(1)) == []
    assert await a.add(entry(2)) == []
    assert await a.add(entry(3)) == ["req-1"]
    assert [e.request_id for e in await a.entries()] == ["req-2", "req-3"]


async def test_settles_queued_during_a_redis_outage_are_spooled_then_pushed(
    replicas: Replicas, redis_server: RedisServer
) -> None:
    a, b = replicas.store("a"), replicas.store("b")
    await a.add(entry(1))
    claimed = await a.claim()
    assert await a.count() == 1
    redis_server.stop()
    await a.add(entry(2))  # kept in a's local spool
    spool = a.spool_path
    assert spool.exists() and stat.S_IMODE(os.stat(spool).st_mode) == 0o600
    assert [e.request_id for e in await a.claim()] == ["req-2"]  # only what a alone holds
    await a.remove(claimed[0].request_id)  # settled meanwhile: removal waits for Redis
    assert await a.count() == 2  # the last count Redis gave (1) and the spool (1)
    with pytest.raises(StateUnavailable):
        await SharedStats(a._redis, where="test").totals()
    redis_server.start()  # back, empty (no persistence), on the same port
    assert [e.request_id for e in await b.entries()] == []  # b cannot know a's spool yet
    assert await a.count() == 1  # pushed by the next call
    assert a.spool is not None and len(a.spool) == 0
    assert [e.request_id for e in await b.claim()] == ["req-2"]


async def test_a_removal_made_during_an_outage_is_applied_when_redis_answers(
    replicas: Replicas, redis_server: RedisServer, tmp_path: Path
) -> None:
    a = replicas.store("a")
    b = replicas.store("b", lease_secs=0.1)
    await a.add(entry(1))
    redis_server.stop()
    await b.remove("req-1")
    assert "req-1" in b._removals
    redis_server.start()
    await a.add(entry(1))  # as if Redis had kept it
    await b.count()
    await b.claim()  # syncs the removal first
    assert await a.count() == 0


async def test_an_unreadable_entry_is_skipped(replicas: Replicas) -> None:
    a = replicas.store("a")
    await a.add(entry(1))
    client = replicas.client()
    await client.hset("svc:settle:entries", "req-x", "{not json")
    await client.zadd("svc:settle:order", {"req-x": 0})
    assert [e.request_id for e in await a.claim()] == ["req-1"]


async def test_an_entry_whose_body_vanished_is_dropped_from_the_order(replicas: Replicas) -> None:
    a = replicas.store("a")
    client = replicas.client()
    await client.zadd("svc:settle:order", {"req-ghost": 0})
    assert await a.claim() == []
    assert await client.zcard("svc:settle:order") == 0


async def test_counters_are_summed_over_replicas(
    replicas: Replicas, redis_server: RedisServer
) -> None:
    one, two = SharedStats(replicas.client(), where="t"), SharedStats(replicas.client(), where="t")
    first, second = PaidStats(), PaidStats()
    first.requests, first.settled, first.settle_queue = 3, 2, 7
    second.requests, second.refused = 4, 1
    await one.push(first)
    await two.push(second)
    await one.push(first)  # nothing new: nothing added
    first.requests += 1
    await one.push(first)
    totals = await two.totals()
    assert totals == {"requests": 8, "settled": 2, "refused": 1}  # the queue gauge is not summed
    redis_server.stop()
    first.requests += 5
    with pytest.raises(StateUnavailable):
        await one.push(first)
    redis_server.start()  # empty: no persistence
    await one.push(first)  # what could not be pushed is pushed now, and only that
    assert await two.totals() == {"requests": 5}


async def test_concurrent_pushes_of_one_replica_add_its_counts_once(
    replicas: Replicas,
) -> None:
    """The periodic push and the last push at close may overlap: each count is added once."""
    one = SharedStats(replicas.client(), where="t")
    stats = PaidStats()
    stats.requests, stats.settled = 100, 75
    await asyncio.gather(*(one.push(stats) for _ in range(5)))
    assert await one.totals() == {"requests": 100, "settled": 75}


async def test_closing_while_the_periodic_push_runs_counts_it_once(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aclose() cancels the periodic pusher. A push Redis has already applied, whose reply is
    still on its way, must not be counted again by the last push at close."""
    state = RedisState.connect(
        redis_server.url, load_config({}), _never, tmp_path / "spool.json", owner=lambda: OWNER
    )
    await state.client.delete(state.stats.key())
    applied = asyncio.Event()
    real_pipeline = state.client.pipeline

    def slow_reply(*args: Any, **kwargs: Any) -> Any:
        pipe = real_pipeline(*args, **kwargs)
        real_execute = pipe.execute

        async def execute(*a: Any, **k: Any) -> Any:
            result = await real_execute(*a, **k)  # applied by Redis...
            applied.set()
            await asyncio.sleep(0.2)  # ...and the reply is slow to come back
            return result

        pipe.execute = execute
        return pipe

    monkeypatch.setattr(state.client, "pipeline", slow_reply)
    stats = PaidStats()
    stats.requests = 100
    state.share(stats, every=0)
    await asyncio.wait_for(applied.wait(), 5)
    await state.aclose(stats)  # cancels the pusher inside that push, then pushes once more
    check = connect_client(redis_server.url)
    try:
        shared = SharedStats(check, where="t", prefix=seller_prefix(OWNER))
        assert await shared.totals() == {"requests": 100}
    finally:
        await check.aclose()


async def _never(plan_id: str, payer: str) -> int:
    raise AssertionError("no balance is read")


async def test_during_an_outage_entries_are_the_spools_and_close_says_what_stays(
    replicas: Replicas, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    a = replicas.store("a")
    await a.add(entry(1))
    redis_server.stop()
    await a.add(entry(2))
    assert [e.request_id for e in await a.entries()] == ["req-2"]
    assert "spooled=1" in repr(a)
    await a.aclose()
    assert "1 settle(s) stay in the local spool" in caplog.text


async def test_a_replicas_state_pushes_its_counters_until_closed(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async def no_read(plan_id: str, payer: str) -> int:
        raise AssertionError("no read expected")

    config = load_config({"stateUrl": redis_server.url})
    state = RedisState.connect(
        redis_server.url, config, no_read, tmp_path / "spool.json", owner=lambda: OWNER
    )
    assert repr(state) == f"RedisState(where='127.0.0.1:{redis_server.port}/0')"
    stats = PaidStats(requests=2)
    state.share(stats, every=0.02)
    for _ in range(250):  # bounded: 5 s
        if await state.stats.totals() == {"requests": 2}:
            break
        await asyncio.sleep(0.02)
    assert await state.stats.totals() == {"requests": 2}
    stats.requests += 1
    await state.aclose(stats)  # the last push
    idle = RedisState.connect(
        redis_server.url, config, no_read, tmp_path / "spool2.json", owner=lambda: OWNER
    )
    assert await idle.stats.totals() == {"requests": 3}
    await idle.aclose()  # never shared: nothing to stop or push


async def test_what_a_previous_run_left_in_the_spool_is_pushed_at_start(
    replicas: Replicas, tmp_path: Path
) -> None:
    journal = await SettleJournal.open(tmp_path / "a-spool.json")
    await journal.add(entry(7, queued_at=time.time()))  # recent: a week-old one is dropped
    await journal.aclose()
    a, b = replicas.store("a"), replicas.store("b")
    assert [e.request_id for e in await a.entries()] == ["req-7"]  # pushed, then read back
    assert [e.request_id for e in await b.claim()] == ["req-7"]


async def test_a_second_replica_cannot_share_a_spool(replicas: Replicas) -> None:
    a, twin = replicas.store("a"), replicas.store("a")
    assert await asyncio.gather(a.count(), a.count()) == [0, 0]  # one opening, shared
    with pytest.raises(SettleQueueLocked):
        await twin.count()


async def test_the_states_keys_follow_the_logged_in_seller(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Every part names its keys in the seller's namespace as it is now: a seller logged out
    has none (the state fails closed), another seller logged in gets its own at once."""

    async def no_read(plan_id: str, payer: str) -> int:
        raise AssertionError("no read expected")

    seller: list[str | None] = ["0xAAA"]
    config = load_config({"stateUrl": redis_server.url})
    state = RedisState.connect(
        redis_server.url, config, no_read, tmp_path / "spool.json", owner=lambda: seller[0]
    )
    try:
        assert state.book.keys("p", "0xB")[0] == "svc:0xaaa:acct:{p|0xb}"
        seller[0] = None
        with pytest.raises(StateUnavailable):
            state.book.keys("p", "0xB")
        seller[0] = "0xCCC"
        assert state.book.keys("p", "0xB")[0] == "svc:0xccc:acct:{p|0xb}"
        seller[0] = "0xAAA"
        assert state.book.keys("p", "0xB")[0] == "svc:0xaaa:acct:{p|0xb}"
    finally:
        await state.aclose()
