"""The script batch and the seller's key namespace, against a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from svc_gateway.selling.state.book import Admission
from svc_gateway.selling.state.redis_batch import MAX_BATCH, ScriptBatch
from svc_gateway.selling.state.redis_book import RedisAdmissionBook
from svc_gateway.selling.state.redis_store import connect_client
from svc_gateway.selling.state.shared import StateUnavailable
from tests.support.redis_server import RedisServer, free_port

PLAN = "plan-1"
PAYER = "0xabc"

SLOW = (  # holds Redis for ARGV[2] ms, then answers ARGV[1]
    "local t = redis.call('TIME') local start = t[1] * 1000000 + t[2] "
    "repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start > ARGV[2] * 1000 "
    "return ARGV[1]"
)


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    made = connect_client(redis_server.url)
    yield made
    await made.aclose()


async def test_no_key_is_written_until_the_seller_is_known(client: aioredis.Redis) -> None:
    seller: dict[str, str | None] = {"prefix": None}

    async def read(plan_id: str, payer: str) -> int:
        return 5

    book = RedisAdmissionBook(
        client,
        read,
        where="test",
        prefix=lambda: seller["prefix"],
        claim_ttl_secs=60.0,
        owed_ttl_secs=600.0,
    )
    with pytest.raises(StateUnavailable, match="SellerUnknown"):
        await book.admit(PLAN, PAYER, 1)
    assert await client.keys("*") == []  # failed closed: nothing admitted, nothing written

    seller["prefix"] = "svc:seller-1:"
    assert isinstance(await book.admit(PLAN, PAYER, 1), Admission)
    keys = await client.keys("*")
    assert keys and all(key.startswith(b"svc:seller-1:") for key in keys)


async def test_a_cancelled_caller_does_not_stop_the_rest_of_a_failed_batch_failing() -> None:
    """The connection fails for the whole batch: the callers still waiting get
    StateUnavailable, the one that gave up (cancelled) is skipped, not failed twice."""
    down = aioredis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=2.0)
    try:
        batch = ScriptBatch(down, "127.0.0.1/0")
        script = down.register_script("return 1")
        gone = batch.call(script, ["k"], [])
        waiting = batch.call(script, ["k"], [])
        gone.cancel()
        with pytest.raises(StateUnavailable, match="ConnectionError"):
            await asyncio.wait_for(waiting, 10.0)
        await batch.drain()
        assert gone.cancelled()
        assert batch.pipelines == 1  # both calls rode one pipeline
    finally:
        await down.aclose()


async def test_calls_made_while_a_pipeline_is_on_its_way_ride_the_next_one_together(
    client: aioredis.Redis,
) -> None:
    """Automatic pipelining: one pipeline on its way at a time; every call made meanwhile,
    in whatever loop turn, is sent in the next one, each with its own answer, in order."""
    batch = ScriptBatch(client, "test")
    echo = client.register_script("return ARGV[1]")
    slow = client.register_script(SLOW)
    await echo(keys=["k"], args=["warm"])  # both scripts known to Redis
    await slow(keys=["k"], args=["warm", 0])
    first = batch.call(slow, ["k"], ["0", 200])  # holds Redis (and the pipeline) for 200 ms
    rest = []
    for i in range(1, 11):  # one call a loop turn, while the first pipeline is held
        await asyncio.sleep(0)
        rest.append(batch.call(echo, ["k"], [str(i)]))
    assert [await f for f in (first, *rest)] == [str(i).encode() for i in range(11)]
    assert batch.pipelines == 2  # the ten waited for the first and went together


async def test_a_pipeline_carries_at_most_max_batch_calls(client: aioredis.Redis) -> None:
    batch = ScriptBatch(client, "test")
    script = client.register_script("return 1")
    await script(keys=["k"], args=[])
    calls = [batch.call(script, ["k"], []) for _ in range(MAX_BATCH + 1)]
    assert await asyncio.gather(*calls) == [1] * (MAX_BATCH + 1)
    assert batch.pipelines == 2


async def test_a_batch_not_answered_in_time_fails_and_its_late_answer_is_never_read(
    redis_server: RedisServer,
) -> None:
    """The whole exchange is bounded by the client's socket timeout; the connection it timed
    out on is dropped, so the next batch reads its own answer, not the late one."""
    client = aioredis.Redis.from_url(
        redis_server.url, socket_timeout=0.1, retry=Retry(NoBackoff(), 0)
    )
    try:
        batch = ScriptBatch(client, "test")
        assert batch.timeout == 0.1
        slow = client.register_script(SLOW)
        echo = client.register_script("return ARGV[1]")
        await echo(keys=["k"], args=["warm"])
        await slow(keys=["k"], args=["warm", 0])
        with pytest.raises(StateUnavailable, match="TimeoutError"):
            await batch.call(slow, ["k"], ["late", 400])
        batch.timeout = 5.0
        assert await batch.call(echo, ["k"], ["fresh"]) == b"fresh"
        assert batch.pipelines == 2
        await batch.aclose()
    finally:
        await client.aclose()


async def test_a_broken_connection_is_retried_as_the_client_retries(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    """Redis closed the batch's connection (a restart, an idle timeout): the client's one
    immediate retry sends the batch again on a new connection, and it is answered."""
    batch = ScriptBatch(client, "test")
    echo = client.register_script("return ARGV[1]")
    await echo(keys=["k"], args=["warm"])
    assert await batch.call(echo, ["k"], ["one"]) == b"one"
    await client.client_kill_filter(skipme=True, _type="normal")  # every other connection
    assert await batch.call(echo, ["k"], ["two"]) == b"two"
    await batch.aclose()


async def test_closing_the_batch_closes_its_connection(client: aioredis.Redis) -> None:
    batch = ScriptBatch(client, "test")
    echo = client.register_script("return ARGV[1]")
    await echo(keys=["k"], args=["warm"])
    before = len(await client.client_list())
    assert await batch.call(echo, ["k"], ["x"]) == b"x"
    assert len(await client.client_list()) == before + 1  # the batch's own connection
    await batch.aclose()
    await asyncio.sleep(0.05)
    assert len(await client.client_list()) == before


async def test_a_call_waiting_when_the_sender_is_cancelled_fails_closed(
    client: aioredis.Redis,
) -> None:
    """The loop is closing and cancels the task sending pipelines: a call still queued, or
    on its way, fails with StateUnavailable instead of waiting for ever."""
    batch = ScriptBatch(client, "test")
    slow = client.register_script(SLOW)
    await slow(keys=["k"], args=["warm", 0])
    on_its_way = batch.call(slow, ["k"], ["a", 300])
    await asyncio.sleep(0.05)  # sent, not answered
    queued = batch.call(slow, ["k"], ["b", 0])
    (sender,) = [t for t in asyncio.all_tasks() if "ScriptBatch._send" in repr(t)]
    sender.cancel()
    for call in (on_its_way, queued):
        with pytest.raises(StateUnavailable, match="CancelledError"):
            await asyncio.wait_for(call, 5.0)
    await batch.drain()
    await batch.aclose()
