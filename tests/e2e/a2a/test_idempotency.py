"""Retries never pay twice on A2A (issue 46), with the official client against the sandbox: a
message sent again (its id is its idempotency key, or ``metadata["x402/idempotency-key"]``)
gets the task's answer and receipt again, paid once; another message under a used key is
refused and burns nothing. Conservation: granted = balance + burned (``market.burned``)."""

from __future__ import annotations

import uuid

from a2a.types import Message, Part, Role, TaskState

from svc_gateway.interop import a2a_x402 as x402

from .conftest import A2AMarket, paid, reply_text, send, status_meta


def keyed(text: str, token: str, message_id: str, key: str | None = None) -> Message:
    metadata = paid(token)
    if key is not None:
        metadata["x402/idempotency-key"] = key
    return Message(
        role=Role.ROLE_USER, message_id=message_id, parts=[Part(text=text)], metadata=metadata
    )


async def test_a_message_sent_again_gets_its_answer_and_receipt_paid_once(
    market: A2AMarket,
) -> None:
    client = await market.client()
    token = await market.token()
    message_id = str(uuid.uuid4())
    first = await send(client, keyed("same question here", token, message_id))
    again = await send(client, keyed("same question here", token, message_id))
    await client.close()
    assert first.task.status.state == again.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert reply_text(again) == reply_text(first)
    assert status_meta(again)[x402.RECEIPTS] == status_meta(first)[x402.RECEIPTS]
    assert await market.burned() == 1


async def test_a_used_key_with_another_message_is_refused_and_burns_nothing(
    market: A2AMarket,
) -> None:
    client = await market.client()
    key = "svc_a2a_key_0000000001"
    first = await send(client, keyed("one question", await market.token(), "m-a", key))
    other = await send(client, keyed("another question", await market.token(), "m-b", key))
    await client.close()
    assert first.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert other.task.status.state == TaskState.TASK_STATE_FAILED
    assert "another request" in reply_text(other)
    assert await market.burned() == 1
