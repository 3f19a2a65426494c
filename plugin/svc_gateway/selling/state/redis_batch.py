"""Lua script calls made in one event-loop turn, sent to Redis in one pipeline.

Each admission and each close is still one round trip, but concurrent requests share it: at 32
clients this costs a fraction of one pipeline per call (redis-py's per-command overhead
dominates on loopback). The scripts run one after the other in Redis, each atomic, in the order
they were called. A script Redis does not know (it restarted, or ``SCRIPT FLUSH``) is loaded
and its calls sent again; a connection that fails fails every call of the batch with
:class:`~.shared.StateUnavailable`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError

from .shared import StateUnavailable

_Call = tuple[AsyncScript, list[str], list[Any], "asyncio.Future[Any]"]


class ScriptBatch:
    """Queue script calls; one pipeline per loop turn carries them all."""

    def __init__(self, client: aioredis.Redis, where: str) -> None:
        self._redis = client
        self.where = where
        self._calls: list[_Call] = []
        self._sending: set[asyncio.Task[None]] = set()
        self.pipelines = 0

    def call(self, script: AsyncScript, keys: list[str], args: list[Any]) -> asyncio.Future[Any]:
        """The script's result (or :class:`StateUnavailable`), once the batch is answered."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._calls:
            loop.call_soon(self._send)
        self._calls.append((script, keys, args, future))
        return future

    async def drain(self) -> None:
        """Wait for the batches on their way (before closing the client)."""
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _send(self) -> None:
        calls, self._calls = self._calls, []
        task = asyncio.get_running_loop().create_task(self._execute(calls))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

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
