"""Lua script calls sent to Redis in shared pipelines, one pipeline on its way at a time.

Each admission and each close is still one round trip, but concurrent requests share it. A
pipeline costs this process 120–200 µs of redis-py's work however few calls it carries (its
objects, the connection pool, packing, the read), against a few µs per call it carries, so
calls are gathered for as long as the pipeline before them is on its way (automatic
pipelining): one call alone is sent at once, in the next loop turn; under load, each pipeline
takes every call made while the previous one was answered (at most :data:`MAX_BATCH`), and a
call waits at most one round trip more than it would alone. The scripts run one after the
other in Redis, each atomic, in the order they were called. A script Redis does not know (it
restarted, or ``SCRIPT FLUSH``) is loaded and its calls sent again; a connection that fails
fails every call of the batch with :class:`~.shared.StateUnavailable`.

Since only one pipeline is on its way at a time, the batch keeps one connection of its own
(made by the client's pool, as the pool makes its own: same class, same settings) and sends
the packed scripts on it directly, without redis-py's ``Pipeline`` (its objects, the pool's
checkout and a timeout of its own around every reply). The whole exchange, the send and every
reply, is bounded by the client's socket timeout once; a broken connection is retried as the
client retries (its ``Retry``); a failure or a cancel in the middle drops the connection, so a
reply is never read by the wrong batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeout

from .shared import StateUnavailable

_Call = tuple[AsyncScript, Sequence[str], list[Any], "asyncio.Future[Any]"]

#: the prefix of every key, or how to name it now (``None``: this seller is not known yet)
Prefix = str | Callable[[], str | None]


class SellerUnknown(Exception):
    """No seller is logged in yet, so the keys of its namespace cannot be named."""


def key_prefix(prefix: Prefix, where: str) -> str:
    """The key prefix now; :class:`StateUnavailable` while the seller is not known (the shared
    state then fails closed or keeps things locally, as during an outage)."""
    value = prefix() if callable(prefix) else prefix
    if not value:
        raise StateUnavailable(where, SellerUnknown())
    return value


#: script calls one pipeline carries at most (the rest ride the next one)
MAX_BATCH = 256


class ScriptBatch:
    """Queue script calls; one pipeline on its way at a time carries every call queued."""

    def __init__(self, client: aioredis.Redis, where: str) -> None:
        self._redis = client
        self.where = where
        pool = client.connection_pool
        settings = dict(pool.connection_kwargs)
        #: the bound on one whole exchange (``None``: unbounded, as the client's reads)
        self.timeout: float | None = settings.get("socket_timeout")
        settings["socket_timeout"] = None  # the exchange is bounded once, not each read
        self._make: Callable[[], AbstractConnection] = lambda: pool.connection_class(**settings)
        self._conn: AbstractConnection | None = None
        self._calls: list[_Call] = []
        #: the one task sending pipelines, while there are calls to send
        self._sender: asyncio.Task[None] | None = None
        self.pipelines = 0

    def call(
        self, script: AsyncScript, keys: Sequence[str], args: list[Any]
    ) -> asyncio.Future[Any]:
        """The script's result (or :class:`StateUnavailable`), once the batch is answered."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._calls.append((script, keys, args, future))
        if self._sender is None:  # its first step, in the next loop turn, takes every call
            self._sender = loop.create_task(self._send())
        return future

    async def drain(self) -> None:
        """Wait for the pipelines on their way (before closing the client)."""
        while self._sender is not None:
            await asyncio.gather(self._sender, return_exceptions=True)

    async def aclose(self) -> None:
        """Wait for the pipelines on their way, then close the batch's connection."""
        await self.drain()
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.disconnect()

    async def _send(self) -> None:
        """Send pipelines one after the other while calls are queued: the calls made while
        one is on its way go in the next, sent in the same loop turn its answer is read."""
        try:
            while self._calls:
                calls, self._calls = self._calls[:MAX_BATCH], self._calls[MAX_BATCH:]
                await self._execute(calls)
        except BaseException as exc:  # cancelled (the loop is closing): none is left waiting
            calls, self._calls = self._calls, []
            _fail(calls, StateUnavailable(self.where, exc))
            raise
        finally:
            self._sender = None

    async def _execute(self, calls: list[_Call]) -> None:
        try:
            results = await self._pipeline(calls)
            unknown = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
            if unknown:
                for script in {id(calls[i][0]): calls[i][0] for i in unknown}.values():
                    script.sha = await self._redis.script_load(script.script)
                again = await self._pipeline([calls[i] for i in unknown])
                for i, result in zip(unknown, again, strict=True):
                    results[i] = result
        except (RedisError, OSError) as exc:
            _fail(calls, StateUnavailable(self.where, exc))
            return
        except BaseException as exc:
            _fail(calls, StateUnavailable(self.where, exc))
            raise
        for (*_, future), result in zip(calls, results, strict=True):
            if future.done():  # the caller is gone (cancelled)
                continue
            if isinstance(result, Exception):  # a script error: fail closed all the same
                future.set_exception(StateUnavailable(self.where, result))
            else:
                future.set_result(result)

    async def _pipeline(self, calls: list[_Call]) -> list[Any]:
        """The calls' results in order (a script error as its exception), one round trip."""
        self.pipelines += 1
        conn = self._conn
        if conn is None:
            conn = self._conn = self._make()
        packed = conn.pack_commands(
            [("EVALSHA", script.sha, len(keys), *keys, *args) for script, keys, args, _ in calls]
        )

        async def exchange() -> list[Any]:
            results: list[Any] = []
            try:
                async with asyncio.timeout(self.timeout):
                    await conn.send_packed_command(packed)
                    for _ in calls:
                        try:
                            results.append(await conn.read_response())
                        except ResponseError as exc:  # this script's own error, read whole
                            results.append(exc)
            except TimeoutError:
                await conn.disconnect(nowait=True)
                raise RedisTimeout(f"no answer from Redis in {self.timeout} s") from None
            except BaseException:  # never leave a reply for the next batch to read
                await conn.disconnect(nowait=True)
                raise
            return results

        async def dropped(error: Exception) -> None:
            await conn.disconnect()

        return await conn.retry.call_with_retry(exchange, dropped)


def _fail(calls: list[_Call], failure: StateUnavailable) -> None:
    """Fail every call still waiting (a caller that gave up is skipped)."""
    for *_, future in calls:
        if not future.done():
            future.set_exception(failure)
