"""The paid flow's deadlines (the paid budget, the handler's timeout) kept by one sweep per
loop rather than a timer per request.

``with deadlines.within(seconds):`` inside a task is ``async with asyncio.timeout(seconds):``:
past the deadline the task is cancelled, and the block raises :class:`TimeoutError` when that
cancellation was the only one (the same ``uncancel`` bookkeeping as :class:`asyncio.Timeout`).
What differs is the cost: ``asyncio.timeout`` pushes a timer onto the loop's heap and cancels
it for every request (with its ``TimerHandle``, the heap's comparisons and the cancelled
handle's removal, about twenty Python calls), while a :class:`Deadlines` registers the task in
a dict and runs one sweep every :data:`SWEEP_SECS` while any deadline is registered, so a
deadline fires at most that much late (deadlines here are tenths of a second and up).
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType

#: how often the deadlines registered on a loop are checked (the most one can fire late)
SWEEP_SECS = 0.01
_NEVER = float("inf")


class Deadline:
    """One registered deadline of the current task (a sync context manager: entering and
    leaving it never awaits)."""

    __slots__ = ("_cancelling", "_expired", "_owner", "_task", "_when")

    def __init__(self, owner: Deadlines, seconds: float | None) -> None:
        """``seconds`` from now (``None``: never), kept by ``owner`` once entered."""
        self._owner = owner
        self._when = time.monotonic() + seconds if seconds is not None else _NEVER
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._expired = False

    def expired(self) -> bool:
        """Whether the deadline passed and cancelled the task (as ``Timeout.expired``)."""
        return self._expired

    def __enter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline must be entered inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        owner = self._owner
        if owner._sweep is not None and task.get_loop() is owner._loop:
            owner._due[self] = self._when  # the usual case: a sweep is already running
        else:
            owner.add(self, task)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task = self._task
        assert task is not None
        owner = self._owner
        if owner._due.pop(self, None) is None and owner._own_timers:
            owner.remove(self)
        # (uncancel is called whenever it expired, as asyncio.Timeout does)
        if (
            self._expired
            and task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc  # no other cancellation asked: ours, as a timeout
        return None

    def _fire(self) -> None:
        self._expired = True
        assert self._task is not None
        self._task.cancel()


class Deadlines:
    """The deadlines of the tasks on one loop (the loop of the first task registered while
    none is; a task on another loop meanwhile gets its own timer, as ``asyncio.timeout``)."""

    def __init__(self, *, sweep_secs: float = SWEEP_SECS) -> None:
        self.sweep_secs = sweep_secs
        self._due: dict[Deadline, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweep: asyncio.TimerHandle | None = None
        self._own_timers: dict[Deadline, asyncio.TimerHandle] = {}

    def within(self, seconds: float | None) -> Deadline:
        """A deadline ``seconds`` from now (``None``: never) for the task that enters it."""
        return Deadline(self, seconds)

    def add(self, deadline: Deadline, task: asyncio.Task[object]) -> None:
        if deadline._when == _NEVER:
            return
        """Register ``deadline`` of ``task`` (arming the sweep of its loop when none runs)."""
        loop = task.get_loop()
        if loop is not self._loop:
            if self._loop is not None and self._loop.is_closed():
                self._due.clear()  # a closed loop's leftovers: nothing will sweep them
            if self._due:  # another loop's deadlines are registered: a timer of its own
                delay = max(deadline._when - time.monotonic(), 0.0)
                self._own_timers[deadline] = loop.call_later(delay, deadline._fire)
                return
            if self._sweep is not None:
                self._sweep.cancel()
                self._sweep = None
            self._loop = loop
        self._due[deadline] = deadline._when
        if self._sweep is None:
            self._sweep = loop.call_later(self.sweep_secs, self._check)

    def remove(self, deadline: Deadline) -> None:
        """Forget ``deadline`` (its task left it)."""
        if self._due.pop(deadline, None) is None:
            timer = self._own_timers.pop(deadline, None)
            if timer is not None:
                timer.cancel()

    def _check(self) -> None:
        self._sweep = None
        if not self._due:
            return  # armed again by the next deadline registered
        now = time.monotonic()
        for deadline, when in list(self._due.items()):
            if when <= now:
                del self._due[deadline]
                deadline._fire()
        if self._due and self._loop is not None and not self._loop.is_closed():
            self._sweep = self._loop.call_later(self.sweep_secs, self._check)
