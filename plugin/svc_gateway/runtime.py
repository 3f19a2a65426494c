"""The plugin-owned event loop.

Hosts call us from anywhere: Hermes runs async tools on per-thread worker loops, its hooks are
synchronous and its commands run on the gateway loop. Loop-bound objects (the httpx client, the
aiohttp servers) therefore live on one loop the plugin owns, in a daemon thread; every entry
point submits its coroutine there. One model for every host and one place to shut down.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
Closer = Callable[[], Awaitable[None]]
#: an event loop (the plugin's own, or a caller's)
Loop = asyncio.AbstractEventLoop

log = logging.getLogger("svc_gateway.runtime")


class RuntimeClosed(RuntimeError):
    """The plugin was closed; nothing more can run on its loop."""


class PluginRuntime:
    """A daemon thread running one asyncio loop, plus a bridge from any thread or loop."""

    def __init__(self, name: str = "svc-plugin-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._closers: list[Closer] = []
        self._closed = False
        self._stopping = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def closed(self) -> bool:
        return self._closed

    def on_plugin_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the plugin loop from any thread."""
        if self._closed:
            coro.close()
            raise RuntimeClosed("the svc plugin has been closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the plugin loop, from whatever loop the caller is on.

        One hop each way (``call_soon_threadsafe``), with no ``concurrent.futures`` layer in
        between; cancelling the caller cancels the task on the plugin loop."""
        caller = asyncio.get_running_loop()
        if caller is self._loop:
            return await coro
        if self._closed:
            coro.close()
            raise RuntimeClosed("the svc plugin has been closed")
        result: asyncio.Future[T] = caller.create_future()
        started: list[asyncio.Task[T]] = []

        def settle(task: asyncio.Task[T]) -> None:
            if result.done():
                return
            if task.cancelled() and self._stopping:  # cancelled by close(), not by the caller
                result.set_exception(RuntimeClosed("the svc plugin has been closed"))
            elif task.cancelled():
                result.cancel()
            elif (error := task.exception()) is not None:
                result.set_exception(error)
            else:
                result.set_result(task.result())

        def done(task: asyncio.Task[T]) -> None:
            try:
                caller.call_soon_threadsafe(settle, task)
            except RuntimeError:  # the caller's loop is gone; nobody waits for the answer
                if not task.cancelled():
                    task.exception()

        def start() -> None:
            if self._stopping:  # arrived while close() runs: never started, never stuck
                coro.close()
                closed = RuntimeClosed("the svc plugin has been closed")
                caller.call_soon_threadsafe(
                    lambda: None if result.done() else result.set_exception(closed)
                )
                return
            task = self._loop.create_task(coro)
            started.append(task)
            task.add_done_callback(done)

        try:
            self._loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop closed between the check and the call
            coro.close()
            raise RuntimeClosed("the svc plugin has been closed") from None
        try:
            return await result
        except asyncio.CancelledError:
            self._loop.call_soon_threadsafe(lambda: [t.cancel() for t in started])
            raise

    def run_sync(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Block the calling thread until ``coro`` finishes on the plugin loop."""
        if self.on_plugin_loop():
            coro.close()
            raise RuntimeError("run_sync called on the plugin loop itself; await run() instead")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def add_closer(self, closer: Closer) -> None:
        """Register an async clean-up that runs on the plugin loop at :meth:`close`."""
        self._closers.append(closer)

    async def _shutdown(self) -> None:
        for closer in reversed(self._closers):
            try:
                await closer()
            except Exception:  # one failing closer must not keep the others from running
                log.exception("error while closing a plugin resource")
        self._closers.clear()
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks(self._loop) if t is not current and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._loop.shutdown_asyncgens()

    def close(self, timeout: float = 10.0) -> None:
        """Run the closers, cancel what is left, stop the loop and join the thread."""
        with self._lock:
            if self._closed:
                return
            if self.on_plugin_loop():
                raise RuntimeError("close() must not be called from the plugin loop")
            self._stopping = True
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout)
            except Exception:
                log.exception("plugin shutdown did not finish cleanly")
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            if not self._loop.is_running():
                self._loop.close()
