"""Selling over A2A 1.x, driven by the official a2a-sdk client and card resolver."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.extensions.common import find_extension_by_uri
from a2a.types import GetTaskRequest, TaskState
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError
from google.protobuf.json_format import MessageToDict

from svc_gateway.interop import a2a_x402 as x402
from svc_gateway.sandbox import SandboxServer
from svc_gateway.selling.handlers import call_maybe_async
from svc_gateway.service.client import ServiceClient
from tests.conftest import CountingTransport

from .conftest import (
    GRANTED,
    A2AMarket,
    MarketFactory,
    message,
    paid,
    reply_text,
    send,
    status_meta,
)


async def test_the_card_resolves_and_declares_the_payment_facts(market: A2AMarket) -> None:
    async with httpx.AsyncClient() as http:
        for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
            card = await A2ACardResolver(http, market.agent.base, path).get_agent_card()
            urls = {i.url: i.protocol_binding for i in card.supported_interfaces}
            assert urls == {market.agent.url: "JSONRPC", market.agent.rest_url: "HTTP+JSON"}
            extension = find_extension_by_uri(card, x402.X402_EXTENSION)
            assert extension is not None and extension.required
            params = MessageToDict(extension.params)
            assert params["agentId"] == market.agent_id
            assert params["planIds"] == [market.plan_id]
            assert params["creditsPerRequest"] == "1"
            assert params["scheme"] and params["network"]


async def test_unpaid_then_paid_follow_up_completes_with_a_receipt(market: A2AMarket) -> None:
    client = await market.client()
    first = await send(client, message("how long is this prompt"))
    assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    meta = status_meta(first)
    assert meta[x402.STATUS] == x402.PAYMENT_REQUIRED
    required = meta[x402.REQUIRED]
    assert required["x402Version"] == 2
    assert required["accepts"][0]["planId"] == market.plan_id
    assert await market.burned() == 0

    token = await market.token()
    second = await send(client, message("", paid(token), task_id=first.task.id))
    assert second.task.id == first.task.id
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(second)
    assert "5 words" in reply_text(second)
    meta = status_meta(second)
    assert meta[x402.STATUS] == x402.PAYMENT_COMPLETED
    (receipt,) = meta[x402.RECEIPTS]
    assert receipt["success"] is True and receipt["creditsRedeemed"] == "1"
    assert receipt["remainingBalance"] == str(GRANTED - 1)
    assert await market.burned() == 1
    await client.close()


async def test_a_paid_first_message_with_the_token_in_band_completes_at_once(
    market: A2AMarket,
) -> None:
    client = await market.client()
    reply = await send(client, message("one two", paid(await market.token())))
    assert reply.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert status_meta(reply)[x402.STATUS] == x402.PAYMENT_COMPLETED
    assert await market.burned() == 1
    await client.close()


async def test_a_retry_with_the_spent_v3_token_gets_the_same_answer_uncharged(
    market: A2AMarket,
) -> None:
    client = await market.client()
    token = await market.token()
    first = await send(client, message("same question", paid(token)))
    again = await send(client, message("same question", paid(token)))
    assert again.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert reply_text(again) == reply_text(first)
    other = await send(client, message("another question", paid(token)))
    assert other.task.status.state != TaskState.TASK_STATE_COMPLETED
    assert "another" not in reply_text(other)
    assert await market.burned() == 1
    await client.close()


async def test_streaming_sends_carry_the_answer_only_after_settling(market: A2AMarket) -> None:
    client = await market.client(streaming=True)
    from a2a.client import ClientCallContext
    from a2a.types import SendMessageRequest

    request = SendMessageRequest(message=message("stream me", paid(await market.token())))
    events = [e async for e in client.send_message(request, context=ClientCallContext(timeout=30))]
    assert events[0].HasField("task")
    last = events[-1]
    assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert await market.burned() == 1
    await client.close()


async def test_the_hosts_credits_function_prices_each_message(
    make_market: MarketFactory,
) -> None:
    asked: list[str] = []

    def credits_for_request(request: dict[str, Any]) -> int:
        asked.append(request["prompt"])
        return 3 if "expensive" in request["prompt"] else 1

    market = await make_market(credits=credits_for_request, dynamic=(1, 5))
    client = await market.client()
    dear = await send(client, message("an expensive question", paid(await market.token())))
    assert dear.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(dear)
    (receipt,) = status_meta(dear)[x402.RECEIPTS]
    assert receipt["creditsRedeemed"] == "3"
    assert await market.burned() == 3
    cheap = await send(client, message("a cheap one", paid(await market.token())))
    assert status_meta(cheap)[x402.RECEIPTS][0]["creditsRedeemed"] == "1"
    assert await market.burned() == 4
    assert "an expensive question" in asked and "a cheap one" in asked
    await client.close()


async def test_a_burst_with_credits_for_three_gets_exactly_three_answers(
    make_market: MarketFactory,
) -> None:
    market = await make_market(per_request=30)  # 100 credits: three requests
    flow, agent = market.agent.flow, market.agent.agent
    default = agent.handler

    async def held(request: dict[str, Any]) -> Any:
        # each answer waits until the three requests the balance cannot cover were refused: a
        # request admitted after every claim had settled would take the book's top-up path
        deadline = time.monotonic() + 30
        while flow.stats.refused < 3 and time.monotonic() < deadline:  # noqa: ASYNC110 - polled: the count is not an event on this loop
            await asyncio.sleep(0.01)
        return await call_maybe_async(default, request)

    agent.handler = held
    client = await market.client()
    tokens = [await market.token() for _ in range(6)]
    replies = await asyncio.gather(
        *(send(client, message(f"burst {i}", paid(t))) for i, t in enumerate(tokens))
    )
    done = [r for r in replies if r.task.status.state == TaskState.TASK_STATE_COMPLETED]
    assert len(done) == 3
    assert await market.burned() == 90 and await market.balance() == GRANTED - 90
    await client.close()


class SettleOutage(CountingTransport):
    async def before(self, method: str, path: str) -> None:
        if path.endswith("/x402/settle"):
            raise aiohttp.ClientConnectionError("settle unreachable")


async def test_a_settle_that_fails_withholds_the_answer_and_burns_nothing(
    make_market: MarketFactory,
) -> None:
    market = await make_market(transport=SettleOutage())
    client = await market.client()
    reply = await send(client, message("secret answer please", paid(await market.token())))
    assert reply.task.status.state == TaskState.TASK_STATE_FAILED
    meta = status_meta(reply)
    assert meta[x402.STATUS] == x402.PAYMENT_FAILED
    assert meta[x402.ERROR] == x402.SETTLEMENT_FAILED
    assert meta[x402.RECEIPTS][0]["success"] is False
    assert "4 words" not in reply_text(reply) and "withheld" in reply_text(reply)
    assert await market.burned() == 0
    await client.close()


async def stranger_token(market: A2AMarket, sandbox: SandboxServer) -> str:
    """A token of another subscriber of the same plan."""
    other = await sandbox.create_account("other")
    other_client = ServiceClient(sandbox.base_url, other["apiKey"])
    try:
        await other_client.order_plan(market.plan_id)
        return await market.token(client=other_client)
    finally:
        await other_client.aclose()


async def test_another_payers_follow_up_and_reads_by_task_id_find_nothing(
    market: A2AMarket, sandbox: SandboxServer
) -> None:
    client = await market.client()
    first = await send(client, message("mine alone"))
    await send(client, message("", paid(await market.token()), task_id=first.task.id))
    stranger = await stranger_token(market, sandbox)
    with pytest.raises(TaskNotFoundError):
        await send(client, message("", paid(stranger), task_id=first.task.id))
    with pytest.raises(TaskNotFoundError):
        await send(client, message("", {}, task_id=first.task.id))
    with pytest.raises(UnsupportedOperationError):
        await client.get_task(GetTaskRequest(id=first.task.id))
    assert await market.burned() == 1
    await client.close()


async def test_an_unpaid_message_naming_its_payer_is_continued_by_that_payer_only(
    market: A2AMarket, sandbox: SandboxServer
) -> None:
    client = await market.client()
    first = await send(client, message("for my eyes", {x402.PAYER: market.subscriber_address}))
    assert first.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    stranger = await stranger_token(market, sandbox)
    with pytest.raises(TaskNotFoundError):  # the first payer does not claim it
        await send(client, message("", paid(stranger), task_id=first.task.id))
    with pytest.raises(TaskNotFoundError):  # naming the payer is no key to the task
        await send(client, message("", {x402.PAYER: market.subscriber_address}, first.task.id))
    assert await market.burned() == 0
    second = await send(client, message("", paid(await market.token()), task_id=first.task.id))
    assert second.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(second)
    assert "3 words" in reply_text(second)
    assert await market.burned() == 1
    await client.close()


async def test_a_payments_py_style_0_3_call_pays_with_the_header(market: A2AMarket) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": "1",
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": "m-1",
                "parts": [{"kind": "text", "text": "old protocol"}],
            }
        },
    }
    headers = {
        "payment-signature": await market.token(),
        "X-A2A-Extensions": x402.X402_EXTENSION,
    }
    async with httpx.AsyncClient(timeout=30) as http:
        answer = (await http.post(market.url, json=body, headers=headers)).json()
    result = answer["result"]
    assert result["status"]["state"] == "completed", answer
    meta = result["status"]["message"]["metadata"]
    assert meta[x402.STATUS] == x402.PAYMENT_COMPLETED
    assert await market.burned() == 1
