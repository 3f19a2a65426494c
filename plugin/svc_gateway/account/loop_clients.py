"""Service clients bound to callers' own loops, so the read-only tools run there without a hop.

A tool that only reads (``Tool.reads_only``) called from a host's loop runs on that loop instead
of crossing to the plugin loop and back (two thread hand-offs, 60–85 µs each on a small VM). An
aiohttp session belongs to the loop it was made on, so each caller loop gets its own client, made
like the plugin's own (same key, same session factory), for the session of the moment.

A loop gets its client on its second read call: the first one hops and uses the plugin's warm
session, so a loop that runs one call and ends (``asyncio.run`` per call, Hermes's fresh thread
for a caller already on a loop) never opens a connection of its own per call. At most
:data:`MAX_LOOPS` loops are remembered (the oldest is forgotten first), keyed weakly.

An async generator suspended on the loop owns its client: closing it closes the client there.
A login or logout and the plugin's close ask the loop to close it (``call_soon_threadsafe``,
never waited for: the caller's thread may be the one blocked in ``close``), and the loop's own
end does (``asyncio.run`` and ``asyncio.Runner`` close the async generators left with
``shutdown_asyncgens``). It is no task, so it is not among the host's tasks. A loop already
closed is never touched: the client is closed where the closer runs (aiohttp closes a session
of a closed loop without it), and the generator is dropped silently (its loop's finalizer
skips a closed loop).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from ..runtime import Loop, RuntimeClosed

if TYPE_CHECKING:
    from ..service.client import ServiceClient

S = TypeVar("S")

#: Caller loops remembered at once (Hermes: one per worker thread that has called a tool).
MAX_LOOPS = 32


class _Entry(Generic[S]):
    """One caller loop's client, the session it was made for, and what owns it there."""

    __slots__ = ("client", "loop", "owner", "session")

    def __init__(self, loop: Loop, session: S | None, client: ServiceClient) -> None:
        self.loop = loop
        self.session = session
        self.client = client
        self.owner: AsyncGenerator[None, None] | None = None


class LoopClients(Generic[S]):
    """Per caller loop, one client for the current session; safe to use from any thread."""

    def __init__(
        self, make: Callable[[S | None], ServiceClient], current: Callable[[], S | None]
    ) -> None:
        self._make = make
        self._current = current
        self._lock = threading.Lock()
        #: loop -> its client, or ``None`` for a loop seen once (or whose client was closed)
        self._loops: weakref.WeakKeyDictionary[Loop, _Entry[S] | None] = weakref.WeakKeyDictionary()
        self._closed = False
        self._closing: set[asyncio.Task[None]] = set()
        #: the entry the last :meth:`get` found or made: the next call from the same loop for
        #: the same session takes it without the lock or the weak-key lookup (the route's paid
        #: flow asks twice a request); cleared when that entry's client is stopped
        self._recent: _Entry[S] | None = None

    def admit(self, loop: Loop) -> bool:
        """Whether a read-only tool runs on ``loop`` itself: from the loop's second call on."""
        recent = self._recent
        if recent is not None and recent.loop is loop:  # it has a client: it is known
            return True
        try:
            with self._lock:
                if self._closed:
                    return False
                if loop in self._loops:
                    return True
                evicted = self._make_room()
                self._loops[loop] = None
        except TypeError:  # a loop that cannot be weakly referenced: always hop
            return False
        self._stop(evicted)
        return False

    def get(self, loop: Loop) -> ServiceClient:
        """The client for the current session on ``loop``, the running loop of this thread."""
        recent = self._recent
        if recent is not None and recent.loop is loop and recent.session is self._current():
            return recent.client
        stale = evicted = None
        with self._lock:
            if self._closed:
                raise RuntimeClosed("the svc plugin has been closed")
            session = self._current()
            entry = self._loops.get(loop)
            if entry is not None and entry.session is session:
                self._recent = entry
                return entry.client
            if loop not in self._loops:
                evicted = self._make_room()
            stale, entry = entry, _Entry(loop, session, self._make(session))
            self._loops[loop] = entry
            entry.owner = _started(self._owned(entry))
            self._recent = entry
        self._stop(stale)
        self._stop(evicted)
        return entry.client

    def _make_room(self) -> _Entry[S] | None:
        """Forget the oldest loop when full; its client (if any) is for the caller to stop."""
        if len(self._loops) < MAX_LOOPS:
            return None
        oldest = next(iter(self._loops))
        return self._loops.pop(oldest)

    async def _owned(self, entry: _Entry[S]) -> AsyncGenerator[None, None]:
        """Suspended while ``entry``'s client lives; closed, it closes the client on its loop."""
        try:
            yield
        finally:
            with self._lock:
                if self._recent is entry:
                    self._recent = None
                if self._loops.get(entry.loop) is entry:
                    self._loops[entry.loop] = None  # still known: its next call runs here
            await entry.client.aclose()

    def _stop(self, entry: _Entry[S] | None) -> None:
        """Have ``entry``'s client closed on its own loop; a closed loop's client is closed on
        the running loop instead, which aiohttp does without touching the closed one."""
        if entry is None:
            return
        if self._recent is entry:
            self._recent = None
        try:
            if _running_loop() is entry.loop:
                self._finish(entry)
            else:
                entry.loop.call_soon_threadsafe(self._finish, entry)
            return
        except RuntimeError:  # the loop is closed
            pass
        self._track(asyncio.get_running_loop().create_task(entry.client.aclose()))

    def _finish(self, entry: _Entry[S]) -> None:
        """On ``entry``'s loop: close its owner (which closes the client)."""
        if entry.owner is not None:
            self._track(entry.loop.create_task(entry.owner.aclose()))

    def _track(self, task: asyncio.Task[None]) -> None:
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _take_all(self, *, close: bool) -> list[_Entry[S]]:
        with self._lock:
            self._closed = self._closed or close
            entries = [e for e in self._loops.values() if e is not None]
            if close:
                self._loops.clear()
            else:
                for loop in list(self._loops):
                    self._loops[loop] = None
        return entries

    async def reset(self) -> None:
        """The session changed: every loop's client is closed (on its loop); the loops stay
        known, so their next read call runs there with a client for the new session."""
        for entry in self._take_all(close=False):
            self._stop(entry)
        await self._drain()

    async def aclose(self) -> None:
        """The plugin closes: close every loop's client, and make no more."""
        for entry in self._take_all(close=True):
            self._stop(entry)
        await self._drain()

    async def _drain(self) -> None:
        """Wait for the closes of clients whose loop had closed (they run on this loop)."""
        here = asyncio.get_running_loop()
        waiting = [t for t in list(self._closing) if t.get_loop() is here]
        if waiting:
            await asyncio.gather(*waiting, return_exceptions=True)


def _started(owner: AsyncGenerator[None, None]) -> AsyncGenerator[None, None]:
    """Run ``owner`` to its ``yield`` now. Its first step runs on this thread's running loop,
    whose async-generator hooks register it: the loop's ``shutdown_asyncgens`` closes it."""
    try:
        owner.asend(None).send(None)
    except StopIteration:
        return owner
    raise RuntimeError("an owner must not wait before its yield")


def _running_loop() -> Loop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def caller_loop(plugin_loop: Loop, running: Loop | None = None) -> Loop | None:
    """The running loop when it is a caller's own (not the plugin's), else ``None``.
    ``running``: the running loop, where the caller has it (asking asyncio for it costs a
    ``getpid`` system call)."""
    loop = _running_loop() if running is None else running
    return None if loop is plugin_loop else loop
