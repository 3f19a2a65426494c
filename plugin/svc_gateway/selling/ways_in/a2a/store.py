"""The A2A tasks this seller keeps: scoped to the payer, bounded in number and in time.

The SDK's in-memory store never evicts and, with its default owner, lets any caller who knows a
task id read or continue it. Here a task is found only by the request that started it, or by a
payer the service verified: the store asks for that payer (:meth:`Payer.verified`, through the
paid flow's verify) before it looks at a task, so a forged or spent token, or no token, never
claims, continues or reads one. A task's owner is fixed once: the payer the first message's
token names, else the payer an unpaid first message says it is offered to
(``x402.payment.payer``), else (a plain a2a-x402 client's unpaid first message) the first payer
that continues the parked task with a token the service verified; from then on no one else finds
it. At most :data:`MAX_TASKS` are kept, each for :data:`TASK_TTL_SECS` after its last change,
the oldest evicted first.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState

MAX_TASKS = 10_000
TASK_TTL_SECS = 3600.0
ANONYMOUS = ""

#: the payer a token verifies as ('' or ``None``: it does not); raises when it cannot be said
Verify = Callable[[str], Awaitable[str | None]]


class Payer(User):  # type: ignore[misc]
    """The caller of one request as the store sees it: the payer its token names (unverified:
    only the owner of a task this request starts), the payer an unpaid message names, and the
    token, verified on demand through the paid flow before any existing task is found."""

    def __init__(
        self,
        claimed: str = "",
        declared: str = "",
        *,
        token: str | None = None,
        verify: Verify | None = None,
    ) -> None:
        self.claimed = claimed.lower()
        #: the payer an unpaid message names: the owner of the task it starts, never a key
        #: to an existing task (only a verified token's payer finds one)
        self.declared = declared.lower()
        #: this request, as the starter of the tasks it creates
        self.request = uuid.uuid4().hex
        self._token = token
        self._verify = verify
        self._verified: str | None = None
        self._lock = asyncio.Lock()

    @property
    def is_authenticated(self) -> bool:
        return False

    @property
    def user_name(self) -> str:
        return self.claimed

    @property
    def owner(self) -> str:
        """The owner of a task this request starts."""
        return self.claimed or self.declared

    async def verified(self) -> str:
        """The payer the service verified this request's token as ('' for none), asked once."""
        async with self._lock:
            if self._verified is None:
                payer = ""
                if self._token and self._verify is not None:
                    payer = (await self._verify(self._token) or "").lower()
                self._verified = payer
            return self._verified

    def __repr__(self) -> str:
        return f"Payer(claimed={self.claimed!r}, declared={self.declared!r})"


def payer_of(context: ServerCallContext) -> Payer:
    user = context.user
    return user if isinstance(user, Payer) else Payer()


@dataclass
class _Kept:
    owner: str
    starter: str
    task: Task
    at: float


class PayerTasks(TaskStore):  # type: ignore[misc]
    """Tasks by id, each with its owner; a bounded LRU with a time to live."""

    def __init__(
        self,
        *,
        max_tasks: int = MAX_TASKS,
        ttl: float = TASK_TTL_SECS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tasks: OrderedDict[str, _Kept] = OrderedDict()
        self._max = max_tasks
        self._ttl = ttl
        self._clock = clock

    def __len__(self) -> int:
        return len(self._tasks)

    def _live(self, task_id: str) -> _Kept | None:
        kept = self._tasks.get(task_id)
        if kept is not None and self._clock() - kept.at > self._ttl:
            del self._tasks[task_id]
            return None
        return kept

    async def save(self, task: Task, context: ServerCallContext) -> None:
        payer = payer_of(context)
        kept = self._live(task.id)
        if kept is None:
            owner, starter = payer.owner, payer.request
        elif kept.starter == payer.request or (
            kept.owner != ANONYMOUS and kept.owner == await payer.verified()
        ):
            owner, starter = kept.owner, kept.starter
        else:
            return  # never reached through get(): no one else changes a task
        copy = Task()
        copy.CopyFrom(task)
        self._tasks[task.id] = _Kept(owner, starter, copy, self._clock())
        self._tasks.move_to_end(task.id)
        while len(self._tasks) > self._max:
            self._tasks.popitem(last=False)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        payer = payer_of(context)
        kept = self._live(task_id)
        if kept is None:
            return None
        if kept.starter != payer.request:
            verified = await payer.verified()  # before the task is looked at again
            kept = self._live(task_id)
            if not verified or kept is None:
                return None
            if kept.owner != verified:
                parked = kept.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
                if not (kept.owner == ANONYMOUS and parked):
                    return None
                kept.owner = verified  # the first verified payer claims the unpaid task
        copy = Task()
        copy.CopyFrom(kept.task)
        return copy

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        owner = await payer_of(context).verified()
        tasks = [k.task for k in self._tasks.values() if owner and k.owner == owner]
        return ListTasksResponse(tasks=tasks[-100:])

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        kept = self._tasks.get(task_id)
        if kept is None:
            return
        payer = payer_of(context)
        if kept.starter == payer.request or (
            kept.owner != ANONYMOUS and kept.owner == await payer.verified()
        ):
            self._tasks.pop(task_id, None)
