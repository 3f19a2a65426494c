"""Commands to Redis packed by hiredis (C), as redis-py's own synchronous connections pack them.

redis-py's asyncio connections pack every command in Python, argument by argument (its
``pack_command``: an encode and a bytes join per argument). The paid path's two scripts carry
about a dozen arguments each, so packing cost more of this process's time per request than
the rest of its Redis work. redis-py's synchronous connections pack with hiredis
(``redis.connection.HiredisRespSerializer``) when it is installed; :func:`pack_with_hiredis`
gives a client's asyncio connections the same packer. The bytes are the same (hiredis writes
the RESP array redis-py writes; ``tests/selling/state/test_redis_packing.py`` compares them)
and a value redis-py refuses (a bool, ``None``) is refused the same way, with ``DataError``.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

try:
    from hiredis import pack_command as _hiredis_pack
    from redis.connection import HiredisRespSerializer
    from redis.utils import HIREDIS_AVAILABLE
except ImportError:  # pragma: no cover - no hiredis, or an older redis-py: its own packer stays
    HIREDIS_AVAILABLE = False


class HiredisPacking:
    """A mixin for an asyncio ``Connection`` class: ``pack_command`` by hiredis."""

    def pack_command(self, *args: Any) -> list[bytes]:
        assert _PACKER is not None  # only mixed in when hiredis is there
        name = args[0]
        if type(name) is str and " " not in name:  # one word: nothing to split
            try:  # hiredis takes str, int, float, bytes and memoryview as they are
                return [_hiredis_pack(args)]
            except TypeError:  # a bytearray, or a value redis-py refuses
                pass
        # redis-py's own hiredis serializer: splits a two-word name, converts a bytearray,
        # and raises redis-py's DataError for the rest
        return _PACKER.pack(*args)  # type: ignore[no-any-return]


_PACKER = HiredisRespSerializer() if HIREDIS_AVAILABLE else None


def pack_with_hiredis(client: aioredis.Redis) -> bool:
    """Have ``client``'s pool make connections that pack with hiredis (before it has made any);
    ``False``, and nothing changed, without hiredis."""
    if _PACKER is None:
        return False
    pool = client.connection_pool
    base = pool.connection_class
    if not issubclass(base, HiredisPacking):
        pool.connection_class = type(f"Hiredis{base.__name__}", (HiredisPacking, base), {})
    return True
