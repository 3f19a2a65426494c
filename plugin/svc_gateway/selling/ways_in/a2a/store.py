"""The A2A tasks this seller keeps: scoped to the payer, bounded in number and in time.

The SDK's in-memory store never evicts and, with its default owner, lets any caller who knows a
task id read or continue it. Here each task belongs to the payer whose token came with the
message (:class:`Payer`, set by the way in from the token's ``from``). An unpaid first message
that names the payer it is offered to (``x402.payment.payer``) starts a task owned by that payer:
the owner stays the same from the unpaid message to the paid follow-up, and a follow-up paid by
anyone else, or unpaid, is "task not found". An unpaid first message that names no payer (a
plain a2a-x402 client) parks its task, which holds only the prompt and the payment request, in
the anonymous scope, and the first paid follow-up claims it for its payer; from then on no one
else finds it. At most :data:`MAX_TASKS` are kept, each for :data:`TASK_TTL_SECS` after its last
change, the oldest evicted first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState

MAX_TASKS = 10_000
TASK_TTL_SECS = 3600.0
ANONYMOUS = ""


class Payer(User):  # type: ignore[misc]
    """The caller as the store sees it: the payer address its token names ('' without one).
    Not authenticated: the flow verifies the token before any work, and the store only hands
    a payer the tasks started or claimed with that payer's tokens."""

    def __init__(self, address: str, declared: str = "") -> None:
        self._address = address.lower()
        #: the payer an unpaid message names: the owner of the task it starts, never a key
        #: to an existing task (only a token's payer finds one)
        self.declared = declared.lower()

    @property
    def is_authenticated(self) -> bool:
        return False

    @property
    def user_name(self) -> str:
        return self._address


def owner_of(context: ServerCallContext) -> str:
    user = context.user
    name = user.user_name if user is not None else ""
    return str(name or ANONYMOUS)


def declared_of(context: ServerCallContext) -> str:
    """The payer an unpaid message names as its task's owner ('' when none)."""
    user = context.user
    return str(getattr(user, "declared", "") or ANONYMOUS)


@dataclass
class _Kept:
    owner: str
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
        owner = owner_of(context)
        kept = self._live(task.id)
        if kept is None:
            owner = owner or declared_of(context)  # a new task: owned by the payer it names
        elif kept.owner == owner_of(context) or kept.owner == declared_of(context) != ANONYMOUS:
            owner = kept.owner  # its owner, or the same request that started it for its payer
        elif kept.owner != ANONYMOUS:
            return  # never reached through get(); another payer cannot overwrite a task
        copy = Task()
        copy.CopyFrom(task)
        self._tasks[task.id] = _Kept(owner, copy, self._clock())
        self._tasks.move_to_end(task.id)
        while len(self._tasks) > self._max:
            self._tasks.popitem(last=False)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        owner = owner_of(context)
        kept = self._live(task_id)
        if kept is None:
            return None
        if kept.owner != owner:
            parked = kept.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            if not (kept.owner == ANONYMOUS and owner != ANONYMOUS and parked):
                return None
            kept.owner = owner  # the first paid follow-up claims the unpaid task
        copy = Task()
        copy.CopyFrom(kept.task)
        return copy

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        owner = owner_of(context)
        tasks = [k.task for k in self._tasks.values() if k.owner == owner and owner != ANONYMOUS]
        return ListTasksResponse(tasks=tasks[-100:])

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        kept = self._tasks.get(task_id)
        if kept is not None and kept.owner == owner_of(context):
            del self._tasks[task_id]
