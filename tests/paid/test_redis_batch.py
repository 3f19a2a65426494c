"""The script batch and the seller's key namespace, against a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from svc_gateway.selling.state.book import Admission
from svc_gateway.selling.state.redis_batch import ScriptBatch
from svc_gateway.selling.state.redis_book import RedisAdmissionBook
from svc_gateway.selling.state.redis_store import connect_client
from svc_gateway.selling.state.shared import StateUnavailable

from .redis_server import RedisServer, free_port

PLAN = "plan-1"
PAYER = "0xabc"


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
