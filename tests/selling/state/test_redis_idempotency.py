"""Idempotency keys shared through a real redis-server: of concurrent retries on two replicas
exactly one runs; a kept answer is read by the other replica; a lease frees only its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from svc_gateway.selling.handlers import Answer
from svc_gateway.selling.state.idempotency import Kept, State
from svc_gateway.selling.state.redis_idempotency import RedisIdempotency
from svc_gateway.selling.state.redis_store import connect_client
from svc_gateway.selling.state.shared import StateUnavailable
from tests.support.redis_server import RedisServer


@pytest.fixture
async def clients(redis_server: RedisServer) -> AsyncIterator[list[aioredis.Redis]]:
    made = [connect_client(redis_server.url) for _ in range(2)]
    yield made
    for client in made:
        await client.aclose()


async def test_two_replicas_share_one_key(clients: list[aioredis.Redis]) -> None:
    one, two = (RedisIdempotency(c, where="r", prefix="svc:s:", lease=30) for c in clients)
    begun = await asyncio.gather(*(store.begin("scope", "fp") for store in (one, two) * 5))
    assert [b.state for b in begun].count(State.NEW) == 1  # one run, nine told it runs
    assert {b.state for b in begun} == {State.NEW, State.RUNNING}
    held = next(b for b in begun if b.state is State.NEW)
    assert (await two.begin("scope", "another")).state is State.REUSED
    await two.abandon("scope", "not-its-lease")
    kept = Kept(Answer(200, b'{"answer":1}', headers=(("payment-response", "r"),)), {"t": 1}, "d")
    await one.finish("scope", held.lease, kept)
    found = await two.begin("scope", "fp")
    assert found.state is State.DONE and found.kept == kept
    ttl = await clients[0].pttl("svc:s:idem:scope")
    assert 86_000_000 < ttl <= 86_400_000  # kept 24 h by default


async def test_an_abandoned_key_runs_afresh_and_an_outage_fails_closed(
    clients: list[aioredis.Redis], redis_server: RedisServer
) -> None:
    store = RedisIdempotency(clients[0], where="r", prefix="svc:s:", lease=30)
    held = await store.begin("k", "fp")
    await store.abandon("k", held.lease)
    assert (await store.begin("k", "fp")).state is State.NEW
    redis_server.stop()
    with pytest.raises(StateUnavailable):
        await store.begin("k2", "fp")
