"""svc_queryAgent's A2A path against an agent that misbehaves: a real aiohttp server on 127.0.0.1
serving a card (copied from a real paid A2A seller, then altered) and canned JSON-RPC replies,
registered with the sandbox as an agent of the market's plan."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.buying.a2a import CARD_PATH, NotA2A, named_interface, query_a2a_agent
from svc_gateway.chat.failure import ToolFailure
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.interop import a2a_x402 as x402
from svc_gateway.service.models import AgentApi, AgentMetadata
from svc_gateway.tools.query import QueryAgentParams

from .conftest import GRANTED, A2AMarket

#: an agent address with a path: its card is at ``BELOW + CARD_PATH``
BELOW = "/agents/x"


class FakeAgent:
    """The card (or a status, or raw bytes) and the JSON-RPC reply are set by each test."""

    def __init__(self) -> None:
        self.card: dict[str, Any] = {}
        self.card_raw: bytes | None = None
        self.card_status = 200
        self.result: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.status = 200
        self.delay = 0.0
        #: card requests from this one on (0: the probe's, 1: the SDK's) hang until stop()
        self.card_hangs_from: int | None = None
        self.card_requests = 0
        self.released = asyncio.Event()
        self.sent: list[dict[str, Any]] = []
        #: sends whose connection is dropped before any answer (then the reply as set)
        self.drops = 0
        self.base = ""
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return self.base + "/a2a"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(CARD_PATH, self._card)
        app.router.add_get(BELOW + CARD_PATH, self._card)  # an address with a path
        app.router.add_post("/a2a", self._rpc)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        self.released.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _card(self, _request: web.Request) -> web.Response:
        self.card_requests += 1
        if self.card_hangs_from is not None and self.card_requests > self.card_hangs_from:
            await self.released.wait()
        body = self.card_raw if self.card_raw is not None else json.dumps(self.card).encode()
        return web.Response(body=body, status=self.card_status, content_type="application/json")

    async def _rpc(self, request: web.Request) -> web.Response:
        call = await request.json()
        self.sent.append(call)
        if self.drops > 0:
            self.drops -= 1
            assert request.transport is not None
            request.transport.close()  # the answer is lost in flight
            return web.Response(status=599)  # never written
        await asyncio.sleep(self.delay)
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": call.get("id")}
        if self.error is not None:
            answer["error"] = self.error
        else:
            answer["result"] = self.result
        return web.json_response(answer, status=self.status)


@pytest.fixture
async def fake(market: A2AMarket) -> AsyncIterator[FakeAgent]:
    agent = FakeAgent()
    await agent.start()
    try:
        async with httpx.AsyncClient() as http:
            card = (await http.get(market.agent.base + CARD_PATH)).json()
        agent_id = await market.builder_client.register_agent(
            AgentMetadata(name="fake A2A agent"),
            AgentApi(endpoints=[{"POST": agent.url}]),
            [market.plan_id],
        )
        for item in card["supportedInterfaces"]:
            item["url"] = agent.url
        for extension in card["capabilities"]["extensions"]:
            if extension["uri"] == x402.X402_EXTENSION:
                extension["params"]["agentId"] = agent_id
        agent.card = card
        yield agent
    finally:
        await agent.stop()


@pytest.fixture
async def buyer(market: A2AMarket, tmp_path: Path) -> AsyncIterator[Any]:
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": market.sandbox.base_url,
            "svcApiKey": market.subscriber_key,
            "approval": "model",  # the A2A path's edges; the person's approval: test_buying.py
        }
    )
    store = CredentialStore(tmp_path / "buyer", use_keyring=False)
    handle = await asyncio.to_thread(svc_gateway.register, gateway, store=store)
    try:
        yield handle.core
    finally:
        await asyncio.to_thread(handle.close)


async def ledger(market: A2AMarket) -> dict[str, int]:
    path = f"/sandbox/ledger/{market.plan_id}/{market.subscriber_address}"
    async with httpx.AsyncClient() as http:
        data = (await http.get(market.sandbox.base_url + path)).json()
    return {k: int(data[k]) for k in ("granted", "burned", "balance", "auditBurned")}


def conserved(book: dict[str, int], burned: int) -> bool:
    """The ledger: granted = balance + burned, its trail agreeing, ``burned`` burned."""
    return (
        book["granted"] == GRANTED == book["balance"] + book["burned"]
        and book["burned"] == book["auditBurned"] == burned
    )


def ask(url: str, prompt: str = "hello there") -> QueryAgentParams:
    return QueryAgentParams.model_validate({"agentUrl": url, "prompt": prompt})


async def failure(core: Any, url: str, prompt: str = "hello there") -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        await query_a2a_agent(core, ask(url, prompt))
    return caught.value


def task(state: str, text: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "ROLE_AGENT", "messageId": "m1", "parts": [{"text": text}]}
    if metadata is not None:
        message["metadata"] = metadata
    return {"task": {"id": "t1", "contextId": "c1", "status": {"state": state, "message": message}}}


async def test_a_missing_card_leaves_the_agent_to_the_http_path(
    fake: FakeAgent, buyer: Any
) -> None:
    fake.card_status = 404
    with pytest.raises(NotA2A):
        await query_a2a_agent(buyer, ask(fake.url))
    assert fake.sent == []


async def test_a_card_that_is_not_json_leaves_the_agent_to_the_http_path(
    fake: FakeAgent, buyer: Any
) -> None:
    fake.card_raw = b"{not json"
    with pytest.raises(NotA2A):
        await query_a2a_agent(buyer, ask(fake.url))


async def test_a_card_not_naming_the_url_leaves_the_agent_to_the_http_path(
    fake: FakeAgent, buyer: Any
) -> None:
    with pytest.raises(NotA2A):
        await query_a2a_agent(buyer, ask(fake.base + "/elsewhere"))


async def test_an_address_with_a_path_has_the_interface_its_card_below_it_names_paid(
    fake: FakeAgent, buyer: Any
) -> None:
    fake.result = task("TASK_STATE_COMPLETED", "from below")
    out = await query_a2a_agent(buyer, ask(fake.base + BELOW))
    assert out["answer"] == "from below" and out["agentUrl"] == fake.url
    assert len(fake.sent) == 1  # to the interface: the fake serves JSON-RPC at /a2a only
    assert fake.card_requests == 3  # the origin's card, the one below the address, the SDK's


async def test_an_interface_named_on_plain_http_elsewhere_is_refused_unsent(
    fake: FakeAgent, buyer: Any
) -> None:
    for item in fake.card["supportedInterfaces"]:
        item["url"] = "http://agent.example/a2a"
    error = await failure(buyer, fake.base)
    assert error.code == "insecure_agent_url" and fake.sent == []


async def test_an_interface_on_another_host_is_checked_and_must_be_registered(
    fake: FakeAgent, buyer: Any, market: A2AMarket
) -> None:
    elsewhere = fake.url.replace("127.0.0.1", "localhost")  # another origin, loopback too
    for item in fake.card["supportedInterfaces"]:
        item["url"] = elsewhere
    error = await failure(buyer, fake.base)
    assert error.code == "agent_url_not_registered" and elsewhere in error.message
    assert fake.sent == [] and await market.burned() == 0


def test_the_interface_named_is_json_rpc_and_1x_first() -> None:
    def card(*interfaces: tuple[str, str, str]) -> dict[str, Any]:
        listed = [{"url": u, "protocolBinding": b, "protocolVersion": v} for u, b, v in interfaces]
        return {"supportedInterfaces": listed}

    old, new = ("https://a/old", "JSONRPC", "0.3.0"), ("https://a/new", "JSONRPC", "1.0")
    rest = ("https://a/rest", "HTTP+JSON", "1.0")
    assert named_interface(card(rest, old, new)) == "https://a/new"
    assert named_interface(card(rest, old)) == "https://a/old"  # the only JSON-RPC one
    assert named_interface(card(rest)) is None
    assert named_interface({"supportedInterfaces": "not a list"}) is None


async def test_a_refused_address_is_left_to_the_http_path_to_report(buyer: Any) -> None:
    with pytest.raises(NotA2A):
        await query_a2a_agent(buyer, ask("https://10.11.12.13/a2a"))


async def test_a_card_the_sdk_cannot_parse_is_refused_before_paying(
    fake: FakeAgent, buyer: Any, market: A2AMarket
) -> None:
    fake.card["capabilities"]["extensions"] = "not a list"
    error = await failure(buyer, fake.url)
    assert error.code == "agent_card_invalid" and "nothing was paid" in error.message
    assert fake.sent == [] and await market.burned() == 0


async def test_a_card_without_the_payment_extension_is_refused_before_paying(
    fake: FakeAgent, buyer: Any
) -> None:
    fake.card["capabilities"]["extensions"] = [{"uri": "https://example.com/other-extension"}]
    error = await failure(buyer, fake.url)
    assert error.code == "agent_card_unpaid" and fake.sent == []


async def test_a_card_naming_no_agent_id_asks_for_one(fake: FakeAgent, buyer: Any) -> None:
    for extension in fake.card["capabilities"]["extensions"]:
        extension.get("params", {}).pop("agentId", None)
    error = await failure(buyer, fake.url)
    assert error.code == "unknown_agent" and fake.sent == []


async def test_a_blank_prompt_is_refused_before_paying(fake: FakeAgent, buyer: Any) -> None:
    error = await failure(buyer, fake.url, prompt="   ")
    assert error.code == "invalid_params" and fake.sent == []


async def test_a_reply_without_a_task_is_an_answer_without_receipt(
    fake: FakeAgent, buyer: Any
) -> None:
    fake.result = {"message": {"role": "ROLE_AGENT", "messageId": "m1", "parts": [{"text": "hi"}]}}
    error = await failure(buyer, fake.url)
    assert error.code == "agent_error" and "not a paid task" in error.message
    assert len(fake.sent) == 1  # the token was sent: the failure says what was charged
    assert x402.PAYLOAD in fake.sent[0]["params"]["message"]["metadata"]


async def test_a_refused_payment_names_the_agents_reason_and_the_plan(
    fake: FakeAgent, buyer: Any, market: A2AMarket
) -> None:
    meta = {x402.STATUS: x402.PAYMENT_REQUIRED, x402.ERROR: x402.INSUFFICIENT_FUNDS}
    fake.result = task("TASK_STATE_INPUT_REQUIRED", "no credits", meta)
    error = await failure(buyer, fake.url)
    assert error.code == "payment_required"
    assert x402.INSUFFICIENT_FUNDS in error.message and "no credits" in error.message
    assert market.plan_id in (error.hint or "")


async def test_a_task_that_does_not_complete_delivers_nothing(fake: FakeAgent, buyer: Any) -> None:
    fake.result = task("TASK_STATE_FAILED", "it broke")
    error = await failure(buyer, fake.url)
    assert error.code == "agent_error" and "did not complete" in error.message


async def test_a_long_answer_without_receipt_is_cut_and_both_are_warned(
    fake: FakeAgent, buyer: Any
) -> None:
    from svc_gateway.buying.answers import MAX_TEXT_CHARS

    fake.result = task("TASK_STATE_COMPLETED", "y" * (MAX_TEXT_CHARS + 10))
    out = await query_a2a_agent(buyer, ask(fake.url))
    assert out["answer"] == "y" * MAX_TEXT_CHARS and out["receipt"] is None
    warnings = " ".join(out["warnings"])
    assert "cut short" in warnings and "no payment receipt" in warnings


async def test_a_dropped_send_is_sent_again_with_the_same_message_id_key_and_token(
    fake: FakeAgent, buyer: Any
) -> None:
    """Issue 46: the message id is the query's idempotency key (also in the metadata), so a
    seller that settled the first send answers the second with the same task, charged once."""
    fake.drops = 1
    fake.result = task("TASK_STATE_COMPLETED", "hi")
    out = await query_a2a_agent(buyer, ask(fake.url))
    assert out["answer"] == "hi" and out["retries"] == 1
    first, again = (call["params"]["message"] for call in fake.sent)
    assert first == again  # the same message: its id, its key, its payment
    assert first["messageId"] == first["metadata"]["x402/idempotency-key"]
    assert first["messageId"].startswith("svc_")


async def test_a_json_rpc_error_is_reported_as_the_agents_answer(
    fake: FakeAgent, buyer: Any
) -> None:
    fake.error = {"code": -32603, "message": "the model is asleep"}
    error = await failure(buyer, fake.url)
    assert error.code == "agent_error" and "the model is asleep" in error.message


async def test_an_http_error_status_is_reported_as_unreachable(fake: FakeAgent, buyer: Any) -> None:
    fake.status = 502
    error = await failure(buyer, fake.url)
    assert error.code == "agent_unreachable" and fake.url in error.message


async def test_an_answer_larger_than_the_cap_is_refused_and_its_charge_reported(
    fake: FakeAgent, buyer: Any
) -> None:
    from svc_gateway.buying.answers import MAX_ANSWER_BYTES

    fake.result = task("TASK_STATE_COMPLETED", "z" * (MAX_ANSWER_BYTES + 1))
    error = await failure(buyer, fake.url)
    assert error.code == "answer_too_large" and len(fake.sent) == 1


async def test_an_agent_slower_than_the_deadline_times_out_after_the_token_went_out(
    fake: FakeAgent, buyer: Any
) -> None:
    fake.delay = 8.0
    fake.result = task("TASK_STATE_COMPLETED", "late")
    until = asyncio.get_running_loop().time() + 3.0
    with pytest.raises(ToolFailure) as caught:
        await query_a2a_agent(buyer, ask(fake.url), until=until)
    assert caught.value.code == "agent_timeout" and len(fake.sent) == 1
    assert "nothing was paid" not in caught.value.message  # the token was sent


async def test_a_dns_lookup_outlasting_the_deadline_is_reported_with_nothing_paid(
    fake: FakeAgent, buyer: Any, market: A2AMarket, monkeypatch: pytest.MonkeyPatch
) -> None:
    from svc_gateway.buying import addresses

    async def never_answers(host: str, port: int) -> list[str]:
        await fake.released.wait()
        return []

    monkeypatch.setattr(addresses, "resolver", never_answers)
    until = asyncio.get_running_loop().time() + 0.5
    with pytest.raises(ToolFailure) as caught:
        await query_a2a_agent(buyer, ask(fake.url), until=until)
    assert caught.value.code == "agent_unreachable"
    assert "could not be resolved" in caught.value.message
    assert "nothing was paid" in caught.value.message
    assert fake.card_requests == 0 and fake.sent == []
    assert conserved(await ledger(market), burned=0)


async def test_a_card_that_does_not_arrive_in_time_leaves_the_agent_to_the_http_path(
    fake: FakeAgent, buyer: Any
) -> None:
    fake.card_hangs_from = 0
    until = asyncio.get_running_loop().time() + 0.5
    with pytest.raises(NotA2A):
        await query_a2a_agent(buyer, ask(fake.url), until=until)
    assert fake.card_requests == 1 and fake.sent == []


async def test_the_deadline_passing_before_the_token_went_out_says_nothing_was_paid(
    fake: FakeAgent, buyer: Any, market: A2AMarket
) -> None:
    fake.card_hangs_from = 1  # the probe reads the card; the SDK's own read of it hangs
    until = asyncio.get_running_loop().time() + 3.0
    with pytest.raises(ToolFailure) as caught:
        await query_a2a_agent(buyer, ask(fake.url), until=until)
    assert caught.value.code == "agent_timeout"
    assert "nothing was paid" in caught.value.message
    assert fake.card_requests == 2 and fake.sent == []
    assert conserved(await ledger(market), burned=0)


class RepliesTooLate(httpx.AsyncBaseTransport):
    """The agent gets the paid message, and the SDK's own timer runs out before its reply
    (httpx's ReadTimeout, as httpx raises it): the card and service calls go through."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method != "POST":
            return response
        await response.aclose()
        raise httpx.ReadTimeout("timed out", request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_the_sdks_own_timeout_is_the_deadline_reported_with_the_charge(
    fake: FakeAgent, buyer: Any, market: A2AMarket, monkeypatch: pytest.MonkeyPatch
) -> None:
    from svc_gateway.buying import a2a

    real = a2a.capped_transport
    monkeypatch.setattr(a2a, "capped_transport", lambda cap: RepliesTooLate(real(cap)))
    fake.result = task("TASK_STATE_COMPLETED", "late")
    with pytest.raises(ToolFailure) as caught:
        await query_a2a_agent(buyer, ask(fake.url))
    assert caught.value.code == "agent_timeout" and len(fake.sent) == 1
    assert "after it was sent the payment token" in caught.value.message
    assert "nothing was paid" not in caught.value.message
    assert conserved(await ledger(market), burned=0)  # the fake agent never settled
