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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError

from .shared import StateUnavailable

_Call = tuple[AsyncScript, list[str], list[Any], "asyncio.Future[Any]"]

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
        self._calls: list[_Call] = []
        self._sending: set[asyncio.Task[None]] = set()
        #: a send is scheduled for the next loop turn
        self._scheduled = False
        self.pipelines = 0

    def call(self, script: AsyncScript, keys: list[str], args: list[Any]) -> asyncio.Future[Any]:
        """The script's result (or :class:`StateUnavailable`), once the batch is answered."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._calls.append((script, keys, args, future))
        if not self._scheduled and not self._sending:
            self._scheduled = True
            loop.call_soon(self._send)
        return future

    async def drain(self) -> None:
        """Wait for the batches on their way (before closing the client)."""
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _send(self) -> None:
        self._scheduled = False
        if self._sending or not self._calls:
            return  # the pipeline on its way sends these when it is answered
        calls, self._calls = self._calls[:MAX_BATCH], self._calls[MAX_BATCH:]
        task = asyncio.get_running_loop().create_task(self._execute(calls))
        self._sending.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        """A pipeline was answered: the calls queued meanwhile go in the next one, now."""
        self._sending.discard(task)
        if self._calls:
            self._send()

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
            failure = StateUnavailable(self.where, exc)
            for *_, future in calls:
                if not future.done():
                    future.set_exception(failure)
            return
        for (*_, future), result in zip(calls, results, strict=True):
            if future.done():  # the caller is gone (cancelled)
                continue
            if isinstance(result, Exception):  # a script error: fail closed all the same
                future.set_exception(StateUnavailable(self.where, result))
            else:
                future.set_result(result)

    async def _pipeline(self, calls: list[_Call]) -> list[Any]:
        self.pipelines += 1
        pipe = self._redis.pipeline(transaction=False)
        for script, keys, args, _ in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        results: list[Any] = await pipe.execute(raise_on_error=False)
        return results
