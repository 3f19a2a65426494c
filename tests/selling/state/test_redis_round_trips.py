"""Round trips to Redis per paid request, counted at the connection (not timed): one for the
admission, one for its close (settled, released or refused), concurrent ones sharing one.
(Once per payer the balance is read from the service, and once per Redis each script is
loaded: the warm-up of the fixture.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, ConnectionPool

from svc_gateway.selling.state.book import Admission
from svc_gateway.selling.state.redis_book import RedisAdmissionBook
from tests.support.redis_server import RedisServer

PLAN = "plan-rt"
PAYER = "0xFeed"


class CountingConnection(Connection):
    """A redis-py connection that counts what it sends: one send, one answer awaited."""

    sends = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        await super().send_packed_command(command, check_health)


async def read_balance(plan_id: str, payer: str) -> int:
    return 1_000


@pytest.fixture
async def book(redis_server: RedisServer) -> AsyncIterator[RedisAdmissionBook]:
    pool = ConnectionPool.from_url(redis_server.url, connection_class=CountingConnection)
    client = aioredis.Redis(connection_pool=pool)
    made = RedisAdmissionBook(
        client, read_balance, where="test", claim_ttl_secs=60.0, owed_ttl_secs=600.0
    )
    # warm: the balance read (once per payer), and each script loaded into Redis (once per
    # script: the first call of one Redis has not seen answers NOSCRIPT, is loaded, resent)
    first = await made.admit(PLAN, PAYER, 1)
    assert isinstance(first, Admission)
    await made.settled(first, 1, 999)
    yield made
    await made.aclose()
    await client.aclose()


async def round_trips(action: Any) -> int:
    before = CountingConnection.sends
    await action
    await asyncio.sleep(0.05)  # a close is sent in the next loop turn
    return CountingConnection.sends - before


async def test_an_admission_is_one_round_trip(book: RedisAdmissionBook) -> None:
    assert await round_trips(book.admit(PLAN, PAYER, 1)) == 1


async def test_settling_an_admission_is_one_round_trip(book: RedisAdmissionBook) -> None:
    claim = await book.admit(PLAN, PAYER, 1)
    assert isinstance(claim, Admission)
    assert await round_trips(book.settled(claim, 1, 997)) == 1


async def test_a_release_and_a_refusal_are_one_round_trip_each(book: RedisAdmissionBook) -> None:
    first, second = await book.admit(PLAN, PAYER, 1), await book.admit(PLAN, PAYER, 1)
    assert isinstance(first, Admission) and isinstance(second, Admission)
    assert await round_trips(book.release(first)) == 1
    assert await round_trips(book.refused(second)) == 1


async def test_concurrent_admissions_and_settles_share_round_trips(
    book: RedisAdmissionBook,
) -> None:
    admitting = asyncio.gather(*(book.admit(PLAN, PAYER, 1) for _ in range(16)))
    sends = CountingConnection.sends
    claims = await admitting
    assert CountingConnection.sends - sends == 1  # sixteen admissions, one pipeline
    settles = [book.settled(c, 1, None) for c in claims if isinstance(c, Admission)]
    assert await round_trips(asyncio.gather(*settles)) == 1
