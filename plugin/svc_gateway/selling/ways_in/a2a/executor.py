"""One paid A2A message through the paid flow's seam (``PaidFlow.handle``): the thin way in.

The a2a-sdk calls :meth:`PaidExecutor.execute` for every message it accepts (blocking,
non-blocking and streaming sends alike). The executor finds the payment (``x402.payment.payload``
in the message's metadata, else the ``payment-signature`` header of payments-py's 0.3 client),
hands one :class:`~svc_gateway.selling.types.PaidRequest` to the flow, and turns the outcome into
A2A events, following the a2a-x402 extension: no payment, a task in ``input-required`` carrying
``payment-required`` and the x402 v2 envelope; paid, the task ``completed`` with
``payment-completed`` and ``x402.payment.receipts`` (a list); a settle the service refused, the
task ``failed`` with ``SETTLEMENT_FAILED`` and nothing delivered.

Nothing is enqueued before the flow has finished (settled or refused), so a streaming send
cannot carry an unpaid answer, and a non-blocking send is answered once the outcome is known
(the SDK waits for the executor's first event). Exceptions never reach the caller verbatim.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from a2a.helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Part, TaskState
from a2a.utils.errors import InternalError, UnsupportedOperationError
from google.protobuf.json_format import MessageToDict

from ....interop import a2a_x402 as x402
from ....redact import get_logger
from ...flow.flow import PaidFlow
from ...handlers import Answer
from ...state.idempotency import meta_key
from ...types import Outcome, PaidOutcome
from ..agent import PromptAgent

if TYPE_CHECKING:
    from a2a.types import Message

log = get_logger("svc_gateway.paid_a2a")

#: the replay route of A2A sales (a retried message with a spent v3 token gets its answer again)
A2A_ROUTE = "a2a"
#: where the interface URL the message came in on sits in ``call_context.state``
URL_STATE = "svc_interface_url"
#: the resource description of an A2A sale's envelope
RESOURCE_DESCRIPTION = "A paid answer from this agent over A2A"


def _metadata(message: Message | None) -> dict[str, Any]:
    if message is None or not message.HasField("metadata"):
        return {}
    return dict(MessageToDict(message.metadata))


def _text(message: Message) -> str:
    return "\n".join(part.text for part in message.parts if part.HasField("text"))


def _answer_text(answer: Answer | None) -> str:
    """The handler's answer as text: its ``answer`` field when it has one, else the body."""
    if answer is None:
        return ""
    body = answer.body.decode("utf-8", errors="replace")
    try:
        value = json.loads(body)
    except ValueError:
        return body
    if isinstance(value, dict) and isinstance(value.get("answer"), str):
        return str(value["answer"])
    return body


def _receipt(raw: dict[str, Any]) -> dict[str, Any]:
    """The flow's receipt with its numbers as strings (metadata numbers are doubles)."""
    return {
        k: str(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in raw.items()
    }


def _message_of(outcome: PaidOutcome) -> str:
    try:
        body = json.loads(outcome.answer.body)
    except ValueError:
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or outcome.reason or outcome.kind.value)


def _idempotency_key(meta: dict[str, Any], message_id: str) -> str | None:
    """The buyer's key: ``metadata["x402/idempotency-key"]``, else the message id (a resent
    message keeps its id)."""
    return meta_key(meta) or message_id or None


class PaidExecutor(AgentExecutor):  # type: ignore[misc]
    """Sells the flow's agent handler, one message at a time, paid in band."""

    def __init__(self, flow: PaidFlow, agent: PromptAgent) -> None:
        self.flow = flow
        self.agent = agent

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise UnsupportedOperationError(message="A paid task cannot be cancelled.")

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        try:
            await self._execute(context, event_queue)
        except Exception as exc:
            log.error("paid A2A message failed (%s)", type(exc).__name__)
            raise InternalError(message="The agent failed; nothing was charged.") from None

    async def _execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        meta = _metadata(message)
        headers: dict[str, str] = (context.call_context.state or {}).get("headers") or {}
        token = x402.token_from_payload(meta.get(x402.PAYLOAD))
        if token is None:
            token = (headers.get(x402.PAYMENT_HEADER) or "").strip() or None
        task = context.current_task
        # a follow-up paying for a parked task asks what the task's first message asked
        first = task.history[0] if task is not None and task.history else message
        prompt = _text(first) or _text(message)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if meta.get(x402.STATUS) == x402.PAYMENT_REJECTED:
            await self._start(context, event_queue)
            await self._status(
                updater,
                TaskState.TASK_STATE_FAILED,
                "The payment was declined; nothing was charged.",
                {x402.STATUS: x402.PAYMENT_FAILED},
            )
            return
        url = str((context.call_context.state or {}).get(URL_STATE) or "")
        flow = self.flow
        request = self.agent.request(  # priced as the paid endpoint prices a prompt
            prompt,
            token,
            url,
            route=A2A_ROUTE,
            description=RESOURCE_DESCRIPTION,
            deliver_unsettled=False,  # never deliver an answer whose settle did not complete
            idempotency_key=_idempotency_key(meta, message.message_id),
        )
        outcome = await flow.on_its_loop(flow.handle(request))
        await self._start(context, event_queue)  # only now: nothing left before settling
        await self._deliver(updater, outcome, token is not None)

    @staticmethod
    async def _start(context: RequestContext, event_queue: EventQueue) -> None:
        """The task, as the first event of a new one (so the SDK stores it, and a paid
        follow-up finds it)."""
        if context.current_task is None:
            assert context.message is not None
            await event_queue.enqueue_event(
                new_task(
                    context.task_id,
                    context.context_id,
                    TaskState.TASK_STATE_SUBMITTED,
                    history=[context.message],
                )
            )

    @staticmethod
    async def _status(
        updater: TaskUpdater, state: Any, text: str, metadata: dict[str, Any]
    ) -> None:
        reply = updater.new_agent_message([Part(text=text)], metadata=metadata)
        await updater.update_status(state, message=reply)

    async def _deliver(self, updater: TaskUpdater, outcome: PaidOutcome, paid: bool) -> None:
        kind = outcome.kind
        if kind is Outcome.PAID:
            meta: dict[str, Any] = {x402.STATUS: x402.PAYMENT_COMPLETED}
            if outcome.receipt is not None:
                meta[x402.RECEIPTS] = [_receipt(outcome.receipt)]
            text = _answer_text(outcome.result)
            await self._status(updater, TaskState.TASK_STATE_COMPLETED, text, meta)
            return
        reason = outcome.reason or kind.value
        if kind is Outcome.REFUSED and outcome.envelope is not None:
            meta = {x402.STATUS: x402.PAYMENT_REQUIRED, x402.REQUIRED: outcome.envelope.x402()}
            if paid:
                meta[x402.ERROR] = x402.error_code(reason)
            text = f"Payment required: {_message_of(outcome)}"
            await self._status(updater, TaskState.TASK_STATE_INPUT_REQUIRED, text, meta)
            return
        meta = {x402.STATUS: x402.PAYMENT_FAILED}
        if kind in (Outcome.WITHHELD, Outcome.DEFERRED):
            meta[x402.ERROR] = x402.SETTLEMENT_FAILED
            if outcome.envelope is not None:
                meta[x402.RECEIPTS] = [outcome.envelope.settle_failure(reason)]
            text = (
                f"The payment could not be settled ({reason}); the answer was withheld and "
                "nothing was delivered."
            )
        else:  # the work failed, or the service or this seller cannot take payments now
            text = _message_of(outcome)
        await self._status(updater, TaskState.TASK_STATE_FAILED, text, meta)
