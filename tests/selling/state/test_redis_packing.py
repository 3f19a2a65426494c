"""Commands to Redis packed by hiredis: the same bytes as redis-py's own packer, the same
refusals, on every connection of a state client (``selling/state/redis_packing.py``)."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
import redis.asyncio.connection as aio_connection
from redis.exceptions import DataError

from svc_gateway.selling.state import redis_packing
from svc_gateway.selling.state.redis_packing import HiredisPacking, pack_with_hiredis
from svc_gateway.selling.state.redis_store import connect_client
from tests.support.redis_server import RedisServer

SAMPLES: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 3, "svc:0xab:plan:1", "k2", "k3", 5, "f" * 32, 600000, 0, "", -1),
    ("HSET", "key", "field", "é ünicode ✓", b"\x00\xffbytes", 1.5, 10**20, 0.1),
    ("CONFIG GET", "maxmemory"),  # a command of two words
    ("SET", "k", memoryview(b"view"), bytearray(b"array")),
    ("SET", "k", memoryview(b"view only")),
]


class _Hiredis(HiredisPacking, aio_connection.Connection):
    pass


@pytest.mark.parametrize("args", SAMPLES)
def test_hiredis_packs_the_bytes_redis_py_packs(args: tuple[Any, ...]) -> None:
    ours = b"".join(bytes(p) for p in _Hiredis().pack_command(*args))
    theirs = b"".join(bytes(p) for p in aio_connection.Connection().pack_command(*args))
    assert ours == theirs


@pytest.mark.parametrize("value", [True, None, object()])
def test_what_redis_py_refuses_is_refused(value: object) -> None:
    with pytest.raises(DataError):
        aio_connection.Connection().pack_command("SET", "k", value)
    with pytest.raises(DataError):
        _Hiredis().pack_command("SET", "k", value)


async def test_a_state_clients_connections_pack_with_hiredis(redis_server: RedisServer) -> None:
    client = connect_client(redis_server.url)
    try:
        assert issubclass(client.connection_pool.connection_class, HiredisPacking)
        await client.set("packed", "é")
        assert await client.get("packed") == "é".encode()
    finally:
        await client.aclose()


async def test_a_client_is_given_hiredis_packing_once(redis_server: RedisServer) -> None:
    client = connect_client(redis_server.url)
    try:
        made = client.connection_pool.connection_class
        assert pack_with_hiredis(client)
        assert client.connection_pool.connection_class is made  # not mixed in twice
    finally:
        await client.aclose()


def test_without_hiredis_redis_pys_own_packer_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    client = aioredis.Redis()
    before = client.connection_pool.connection_class
    monkeypatch.setattr(redis_packing, "_PACKER", None)
    assert not pack_with_hiredis(client)
    assert client.connection_pool.connection_class is before
