"""Deadlines of one length on one loop under one timer: ``asyncio.timeout``'s rules, cheaper.

Every paid request runs its admission within ``paidBudgetSecs`` and its work within
``handlerTimeoutSecs``. With ``asyncio.timeout`` each of those is a timer of its own in the
loop's heap: pushed at the start, cancelled at the end, and left there (cancelled) until the
loop sweeps it, so under load the heap holds thousands and every push compares its way through
them. Deadlines of one length start in the order they end, so a first-in, first-out queue
keeps them sorted for free: one timer, armed for the oldest live deadline, serves them all,
and a request's deadline costs an append and a flag.

:class:`Deadline` behaves as ``asyncio.timeout(secs)`` does for the task that enters it: when
it passes, the task is cancelled and the ``CancelledError`` leaving the block becomes
``TimeoutError`` (unless someone else cancelled the task too); :meth:`Deadline.expired` says
which; a cancellation from outside passes through untouched. Unlike ``asyncio.timeout`` it is
a plain context manager (``with deadline:`` inside a coroutine): entering and leaving it await
nothing, so they are plain calls, not two coroutines made and run per request.
"""

from __future__ import annotations

import asyncio
import collections
from types import TracebackType

from ...runtime import Loop

ENTERED, EXITED, EXPIRING, EXPIRED = range(4)

CLOCKS_KEPT = 16
"""(loop, length) clocks a :class:`Deadlines` keeps; more (loops come and go) starts afresh."""


class Deadline:
    """``with deadlines(secs):`` — one request's deadline (entered once, inside a task on the
    loop it was made for)."""

    __slots__ = ("_cancelling", "_clock", "_state", "_task", "when")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._state = -1
        #: the loop time at which it passes (set on entering)
        self.when = 0.0

    def expired(self) -> bool:
        """Whether it passed and turned the block's cancellation into ``TimeoutError``."""
        return self._state == EXPIRED

    def __enter__(self) -> Deadline:
        if self._state != -1:
            raise RuntimeError("a Deadline is entered once")
        task = asyncio.current_task(self._clock.loop)  # the loop given: no pid check
        if task is None:
            raise RuntimeError("a Deadline is used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._state = ENTERED
        self._clock.enter(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task, self._task = self._task, None  # nothing kept alive once out of the block
        if self._state == EXPIRING:
            self._state = EXPIRED
            assert task is not None
            if task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc
        else:
            self._state = EXITED

    def _expire(self) -> None:
        """Passed while its block runs (the clock expires only entered ones): cancel the
        task, as ``asyncio.timeout`` does."""
        assert self._task is not None
        self._task.cancel()
        self._state = EXPIRING


class Clock:
    """The live deadlines of one length on one loop, oldest first, and their one timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, secs: float) -> None:
        self.loop = loop
        self.secs = secs
        self._queue: collections.deque[Deadline] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def enter(self, deadline: Deadline) -> None:
        queue = self._queue
        while queue and queue[0]._state != ENTERED:  # finished at the front: forgotten
            queue.popleft()
        deadline.when = when = self.loop.time() + self.secs
        queue.append(deadline)
        if self._timer is None:
            self._timer = self.loop.call_at(when, self._fire)

    def _fire(self) -> None:
        """Expire every deadline that has passed; arm the timer for the oldest one left."""
        self._timer = None
        now = self.loop.time()
        queue = self._queue
        while queue:
            head = queue[0]
            if head._state != ENTERED:
                queue.popleft()
            elif head.when <= now:
                queue.popleft()
                head._expire()
            else:
                self._timer = self.loop.call_at(head.when, self._fire)
                return


class Deadlines:
    """A flow's deadlines, one :class:`Clock` per (running loop, length)."""

    def __init__(self) -> None:
        self._clocks: dict[tuple[asyncio.AbstractEventLoop, float], Clock] = {}

    def __call__(self, secs: float, loop: Loop | None = None) -> Deadline:
        """A deadline ``secs`` from when it is entered, on the running loop (``loop``, where
        the caller has it: asking asyncio for it costs a ``getpid`` system call)."""
        if loop is None:
            loop = asyncio.get_running_loop()
        clock = self._clocks.get((loop, secs))
        if clock is None:
            if len(self._clocks) >= CLOCKS_KEPT:
                self._clocks.clear()  # a cleared clock's timer still serves its deadlines
            clock = self._clocks[(loop, secs)] = Clock(loop, secs)
        return Deadline(clock)
