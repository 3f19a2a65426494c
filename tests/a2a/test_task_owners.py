"""Who finds an A2A task: only its owner, a payer the service verified; a token that does not
verify never claims, continues or reads a task, whatever payer it names."""

from __future__ import annotations

import base64
import json

import pytest
from a2a.types import TaskState
from a2a.utils.errors import TaskNotFoundError

from svc_gateway.encoding import decode_b64_json
from svc_gateway.interop import a2a_x402 as x402
from svc_gateway.sandbox import SandboxServer

from .conftest import A2AMarket, message, paid, reply_text, send
from .test_selling import stranger_token


def forged(token: str, payer: str | None = None) -> str:
    """The token with its signature broken (and, given ``payer``, naming that payer)."""
    if token.count(".") == 2:
        head, body, signature = token.split(".")
        if payer is not None:
            claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            claims.setdefault("payload", {}).setdefault("authorization", {})["from"] = payer
            raw = json.dumps(claims, separators=(",", ":")).encode()
            body = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        flipped = ("A" if signature[5] != "A" else "B").join((signature[:5], signature[6:]))
        return f"{head}.{body}.{flipped}"
    doc = decode_b64_json(token)
    assert doc is not None
    signature = str(doc["payload"]["signature"])
    doc["payload"]["signature"] = signature[:-1] + ("0" if signature[-1] != "0" else "1")
    if payer is not None:
        doc["payload"]["authorization"]["from"] = payer
    raw = json.dumps(doc, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def test_a_forged_token_neither_claims_nor_reads_an_anonymous_parked_task(
    market: A2AMarket, sandbox: SandboxServer
) -> None:
    client = await market.client()
    first = await send(client, message("the victim's secret question"))  # names no payer
    assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    attacker = forged(await stranger_token(market, sandbox))
    with pytest.raises(TaskNotFoundError):  # in band
        await send(client, message("", paid(attacker), task_id=first.task.id))
    with pytest.raises(TaskNotFoundError):  # as payments-py's header
        await send(
            client,
            message("", {x402.STATUS: x402.PAYMENT_SUBMITTED}, task_id=first.task.id),
            headers={x402.PAYMENT_HEADER: attacker},
        )
    with pytest.raises(TaskNotFoundError):  # nor does an unpaid follow-up read it
        await send(client, message("", {}, task_id=first.task.id))
    # the task is still the first sender's to pay for, and answers its own prompt
    second = await send(client, message("", paid(await market.token()), task_id=first.task.id))
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(second)
    assert "5 words" in reply_text(second)
    assert await market.burned() == 1
    await client.close()


async def test_a_forged_token_naming_the_owner_does_not_find_the_owners_task(
    market: A2AMarket,
) -> None:
    client = await market.client()
    owner = market.subscriber_address
    first = await send(client, message("owned question", {x402.PAYER: owner}))
    assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    impostor = forged(await market.token(), payer=owner)
    with pytest.raises(TaskNotFoundError):
        await send(client, message("", paid(impostor), task_id=first.task.id))
    second = await send(client, message("", paid(await market.token()), task_id=first.task.id))
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(second)
    assert await market.burned() == 1
    await client.close()


async def test_once_a_verified_payer_claims_an_anonymous_task_no_other_payer_finds_it(
    market: A2AMarket, sandbox: SandboxServer
) -> None:
    client = await market.client()
    first = await send(client, message("claimed once"))
    second = await send(client, message("", paid(await market.token()), task_id=first.task.id))
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED
    with pytest.raises(TaskNotFoundError):
        await send(
            client, message("", paid(await stranger_token(market, sandbox)), first.task.id)
        )
    assert await market.burned() == 1
    await client.close()
