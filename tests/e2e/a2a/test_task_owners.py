"""Who finds an A2A task: only its owner, a payer the service verified; a token that does not
verify never claims, continues or reads a task, whatever payer it names."""

from __future__ import annotations

import base64
import json

import aiohttp
import pytest
from a2a.client import ClientCallContext
from a2a.server.context import ServerCallContext
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError, TaskNotFoundError

from svc_gateway.encoding import decode_b64_json
from svc_gateway.interop import a2a_x402 as x402
from svc_gateway.sandbox import SandboxServer
from svc_gateway.selling.ways_in.a2a.store import Payer, PayerTasks, Verify
from tests.conftest import CountingTransport

from .conftest import A2AMarket, MarketFactory, message, paid, reply_text, send
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
    with pytest.raises(TaskNotFoundError):  # nor a payload that is no token at all
        junk = {x402.STATUS: x402.PAYMENT_SUBMITTED, x402.PAYLOAD: "x" * 20_000}
        await send(client, message("", junk, task_id=first.task.id))
    with pytest.raises(TaskNotFoundError):  # nor does an unpaid follow-up read it
        await send(client, message("", {}, task_id=first.task.id))
    # the task is still the first sender's to pay for, and answers its own prompt
    second = await send(client, message("", paid(await market.token()), task_id=first.task.id))
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(second)
    assert "victim's" in reply_text(second)  # the longest word of the first message
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
        await send(client, message("", paid(await stranger_token(market, sandbox)), first.task.id))
    assert await market.burned() == 1
    await client.close()


class VerifyOutage(CountingTransport):
    """The service's verify is unreachable once ``down`` is set."""

    down = False

    async def before(self, method: str, path: str) -> None:
        if self.down and path.endswith("/x402/verify"):
            raise aiohttp.ClientConnectionError("verify unreachable")


async def test_a_follow_up_whose_token_cannot_be_verified_gets_an_error_not_the_task(
    make_market: MarketFactory,
) -> None:
    outage = VerifyOutage()
    market = await make_market(transport=outage)
    client = await market.client()
    first = await send(client, message("wait for the service"))
    outage.down = True
    with pytest.raises(A2AError, match="could not be verified") as raised:
        await send(client, message("", paid(await market.token()), task_id=first.task.id))
    assert "wait for the service" not in str(raised.value)
    outage.down = False
    second = await send(client, message("", paid(await market.token()), task_id=first.task.id))
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(second)
    assert await market.burned() == 1
    await client.close()


def context_of(payer: Payer) -> ServerCallContext:
    return ServerCallContext(user=payer)


async def test_the_store_finds_a_task_for_its_starter_and_its_verified_owner_only() -> None:
    async def verifies_as(answer: str | None) -> Verify:
        async def verify(_token: str) -> str | None:
            return answer

        return verify

    store = PayerTasks()
    owner = "0x" + "a" * 40
    starter = Payer(owner, token="t")
    task = Task(id="t-1", status=TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED))
    await store.save(task, context_of(starter))
    assert await store.get("t-1", context_of(starter)) is not None  # the request that started it
    forger = Payer(owner, token="forged", verify=await verifies_as(None))
    assert await store.get("t-1", context_of(forger)) is None
    assert not (await store.list(ListTasksRequest(), context_of(forger))).tasks
    await store.delete("t-1", context_of(forger))
    await store.save(Task(id="t-1"), context_of(forger))  # no overwrite either
    again = Payer(owner, token="real", verify=await verifies_as(owner))
    found = await store.get("t-1", context_of(again))
    assert found is not None and found.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [t.id for t in (await store.list(ListTasksRequest(), context_of(again))).tasks] == [
        "t-1"
    ]
    other = Payer("0x" + "b" * 40, token="other", verify=await verifies_as("0x" + "b" * 40))
    assert await store.get("t-1", context_of(other)) is None


async def test_reading_cancelling_or_subscribing_to_a_task_by_id_is_refused_whatever_the_token(
    market: A2AMarket,
) -> None:
    client = await market.client(streaming=True)
    other = await market.client()
    first = await send(
        other, message("parked for reading", {x402.PAYER: market.subscriber_address})
    )
    task_id = first.task.id
    for token in (
        forged(await market.token(), payer=market.subscriber_address),
        await market.token(),
    ):
        headers = ClientCallContext(service_parameters={x402.PAYMENT_HEADER: token}, timeout=30)
        with pytest.raises(A2AError) as read:
            await client.get_task(GetTaskRequest(id=task_id), context=headers)
        with pytest.raises(A2AError) as cancel:
            await client.cancel_task(CancelTaskRequest(id=task_id), context=headers)
        with pytest.raises(A2AError) as listing:
            await client.list_tasks(ListTasksRequest(), context=headers)
        with pytest.raises(A2AError) as subscribe:
            async for _event in client.subscribe(
                SubscribeToTaskRequest(id=task_id), context=headers
            ):
                pass
        for refused in (read, cancel, listing, subscribe):
            assert "parked for reading" not in str(refused.value)
    await client.close()
    # untouched: still parked for its payer, who pays and gets the answer
    done = await send(other, message("", paid(await market.token()), task_id=task_id))
    assert done.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(done)
    await other.close()
