"""svc_queryAgent against the real paid endpoint, and against small fake agents on loopback
for what a well-behaved endpoint never does (a foreign card, a huge or slow answer, a forged
receipt). A fake agent is registered with the service at its own URL unless the test is about
a URL the agent never registered."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp import ClientSession, web

from svc_gateway.account.core import PluginCore
from svc_gateway.buying import addresses as query_address
from svc_gateway.buying.addresses import is_loopback_host
from svc_gateway.buying.answers import MAX_ANSWER_BYTES, MAX_TEXT_CHARS
from svc_gateway.buying.retrying import MAX_ATTEMPTS
from svc_gateway.config import PluginConfig
from svc_gateway.encoding import decode_access_token, token_authorization
from svc_gateway.sandbox import SandboxServer
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.service.pricing import crypto_price, fiat_price, fixed_credits
from svc_gateway.tools import TOOLS
from tests.support import serve_app
from tests.support.market import DEMO_TOKEN, Market, MarketFactory

Answer = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class FakeAgent:
    url: str
    card: dict[str, Any] | None
    posts: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    heads: int = 0


async def _ok(request: web.Request) -> web.StreamResponse:
    return web.json_response({"answer": "fake"})


@asynccontextmanager
async def fake_agent(
    card: dict[str, Any] | None, answer: Answer = _ok, head_length: int | None = None
) -> AsyncIterator[FakeAgent]:
    """An agent on 127.0.0.1 serving ``agent.card`` (if any; tests may fill it in later) and
    answering POSTs with ``answer``; a HEAD answers with ``head_length`` when given."""
    app = web.Application()
    agent = FakeAgent(url="", card=card)

    async def card_route(request: web.Request) -> web.StreamResponse:
        if agent.card is None:
            raise web.HTTPNotFound()
        return web.json_response(agent.card)

    async def post(request: web.Request) -> web.StreamResponse:
        agent.posts.append(request.path)
        agent.tokens.append(request.headers.get("payment-signature", ""))
        return await answer(request)

    async def head(request: web.Request) -> web.StreamResponse:
        agent.heads += 1
        if head_length is None:
            raise web.HTTPMethodNotAllowed("HEAD", ["POST"])
        return web.Response(headers={"Content-Length": str(head_length)})

    app.router.add_get("/agent/.well-known/agent.json", card_route)
    app.router.add_post("/agent", post)
    app.router.add_route("HEAD", "/agent", head)
    async with serve_app(app, shutdown_timeout=0.1) as origin:
        agent.url = f"{origin}/agent"
        yield agent


def good_card(market: Market) -> dict[str, Any]:
    return {"agentId": market.agent_id, "planId": market.plan_id, "schemes": ["svc:erc4337"]}


@asynccontextmanager
async def registered_fake(
    make_market: MarketFactory,
    answer: Answer = _ok,
    card: bool = True,
    head_length: int | None = None,
    **market_kw: Any,
) -> AsyncIterator[tuple[Market, FakeAgent]]:
    """A market whose agent is registered at a fake agent's URL, with credits ordered."""
    market = await make_market(register_agent=False, **market_kw)
    async with fake_agent(None, answer, head_length) as agent:
        await market.register_agent(agent_url=agent.url)
        if card:
            agent.card = good_card(market)
        await market.order()
        yield market, agent


async def query(market: Market, agent_url: str, **extra: Any) -> tuple[bool, dict[str, Any]]:
    params = {"agentUrl": agent_url, "prompt": "how many words here", "planId": market.plan_id}
    params.update(extra)
    params = {k: v for k, v in params.items() if v is not None}
    result = await market.subscriber_gw.call_tool("svc_queryAgent", params)
    return result.isError, result.structuredContent


def receipt_header(receipt: dict[str, Any]) -> dict[str, str]:
    return {"payment-response": base64.b64encode(json.dumps(receipt).encode()).decode()}


def test_loopback_hosts() -> None:
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback_host(host), host
    for other in ("10.0.0.1", "192.168.1.2", "example.com", "localhost.example.com", "", None):
        assert not is_loopback_host(other), other


@pytest.mark.parametrize(
    "url", ["http://agent.example.com/svc/agent", "http://10.1.2.3:8402/svc/agent"]
)
async def test_refuses_plain_http_to_a_remote_host(market: Market, url: str) -> None:
    await market.order()
    failed, data = await query(market, url)
    assert failed
    assert data["error"]["code"] == "insecure_agent_url"
    assert "https" in data["error"]["hint"]
    assert await market.balance() == 10


async def test_answer_receipt_and_service_balance_from_the_real_endpoint(market: Market) -> None:
    await market.order()
    failed, data = await query(market, market.endpoint.url)  # no agentId: taken from the card
    assert not failed, data
    assert data["answer"]["wordCount"] == 4
    assert data["agentId"] == market.agent_id
    receipt = data["receipt"]
    assert receipt["success"] is True and receipt["valid"] is True
    assert receipt["creditsRedeemed"] == "2"
    assert receipt["remainingBalance"] == "8"
    assert receipt["payer"].lower() == market.subscriber_address.lower()
    assert receipt["transaction"]
    assert data["balanceAfter"] == "8"  # what the service says, not the agent
    assert await market.balance() == 8
    spend = await market.subscriber_gw.run_command("svc_spend")  # the plugin kept the receipt
    assert (
        "You paid 2 credits (0.20 USD) for 1 call " in spend and f"agent {market.agent_id}" in spend
    )
    assert str(receipt["transaction"]) in spend
    # a v3 token is bound and single use; a v2 fallback is said out loud (and only then)
    v2_warning = [w for w in data.get("warnings", []) if "reusable (v2)" in w]
    assert data["tokenVersion"] in (2, 3)
    assert bool(v2_warning) == (data["tokenVersion"] == 2)
    if data["tokenVersion"] == 3:
        assert "warnings" not in data


async def test_the_token_is_single_use_and_bound_to_agent_url_and_verb(
    make_market: MarketFactory,
) -> None:
    async with registered_fake(make_market) as (market, agent):
        failed, data = await query(market, agent.url)
    assert not failed, data
    (token,) = agent.tokens
    decoded = decode_access_token(token) or {}
    assert data["tokenVersion"] == 3
    assert token_authorization(decoded).get("nonce")  # single use: settle consumes it
    assert decoded["resource"]["url"] == agent.url
    assert decoded["accepted"]["extra"]["httpVerb"] == "POST"
    assert decoded["accepted"]["extra"]["agentId"] == market.agent_id
    assert not any("reusable (v2)" in w for w in data["warnings"])


async def test_a_402_becomes_guidance(market_without_top_up: Market) -> None:
    market = market_without_top_up
    failed, data = await query(market, market.endpoint.url, agentId=market.agent_id)
    assert failed
    error = data["error"]
    assert error["code"] == "payment_required"
    assert "insufficient credits" in error["message"]
    assert market.plan_id in error["hint"] and "svc_orderPlan" in error["hint"]


@pytest.mark.parametrize("status", [404, 405])
async def test_an_agent_404_is_an_error_that_does_not_say_retry(
    market: Market, status: int
) -> None:
    await market.order()
    failed, data = await query(market, market.endpoint.url, prompt=f"status:{status}")
    assert failed, data
    error = data["error"]
    assert error["code"] == "agent_error"
    assert str(status) in error["message"]
    assert "retry" not in error["hint"].lower().replace("retrying the same url will not", "")
    assert "later" not in error["hint"].lower()
    assert "agentUrl" in error["hint"]
    assert await market.balance() == 10  # a failed request is not settled


@pytest.mark.parametrize("status", [400, 500, 503])
async def test_an_agent_error_status_is_not_success(market: Market, status: int) -> None:
    await market.order()
    failed, data = await query(market, market.endpoint.url, prompt=f"status:{status}")
    assert failed, data
    assert data["error"]["code"] == "agent_error"
    assert f"HTTP {status}" in data["error"]["message"]
    if status >= 500:
        assert "Retry later" in data["error"]["hint"]
    else:
        assert "Retry" not in data["error"]["hint"]
    assert await market.balance() == 10


async def test_a_card_claiming_a_real_agent_at_an_unregistered_url_gets_no_token(
    market: Market,
) -> None:
    """Issue 10: a card on 127.0.0.1 claiming a real agent's id used to receive a token."""
    await market.order()
    async with fake_agent(good_card(market)) as impostor:
        failed, data = await query(market, impostor.url)
        again, data_with_id = await query(market, impostor.url, agentId=market.agent_id)
    assert failed and again
    for answer in (data, data_with_id):
        assert answer["error"]["code"] == "agent_url_not_registered"
        assert market.endpoint.url in answer["error"]["hint"]  # the registered one is named
    assert impostor.posts == [] and impostor.tokens == []
    assert await market.balance() == 10


async def test_refuses_a_card_for_another_agent_and_does_not_pay(
    make_market: MarketFactory,
) -> None:
    async with registered_fake(make_market) as (market, agent):
        assert agent.card is not None
        agent.card["agentId"] = "did:svc:someone-else"
        failed, data = await query(market, agent.url, agentId=market.agent_id)
        assert agent.posts == []
    assert failed
    assert data["error"]["code"] == "agent_mismatch"
    assert "did:svc:someone-else" in data["error"]["message"]
    assert await market.balance() == 10


async def test_an_unknown_agent_id_is_refused_before_paying(market: Market) -> None:
    await market.order()
    failed, data = await query(market, market.endpoint.url, agentId="424242424242")
    assert failed
    assert data["error"]["code"] in ("unknown_agent", "agent_mismatch")
    assert await market.balance() == 10


async def test_refuses_a_card_without_the_plans_scheme(make_market: MarketFactory) -> None:
    async with registered_fake(make_market) as (market, agent):
        assert agent.card is not None
        agent.card["schemes"] = ["svc:card-delegation"]
        failed, data = await query(market, agent.url)
        assert agent.posts == []
    assert failed and data["error"]["code"] == "scheme_not_accepted"


async def test_no_card_is_a_warning_and_text_answers_are_returned(
    make_market: MarketFactory,
) -> None:
    async def text(request: web.Request) -> web.StreamResponse:
        return web.Response(text="plain words", content_type="text/plain")

    async with registered_fake(make_market, text, card=False) as (market, agent):
        unnamed, refused = await query(market, agent.url)  # no card, no agentId: who is it?
        failed, data = await query(market, agent.url, agentId=market.agent_id)
    assert unnamed and refused["error"]["code"] == "unknown_agent"
    assert "agentId" in refused["error"]["hint"]
    assert not failed, data
    assert data["answer"] == "plain words"
    assert data["receipt"] is None
    assert any("No agent card" in w for w in data["warnings"])
    assert any("no payment receipt" in w for w in data["warnings"])


async def test_without_plan_id_the_agents_only_plan_is_used(market: Market) -> None:
    """Issue 7: a subscriber has no plans of their own to list; the agent sells exactly one."""
    await market.order()
    failed, data = await query(market, market.endpoint.url, planId=None)
    assert not failed, data
    assert data["planId"] == market.plan_id
    assert data["balanceAfter"] == "8"


async def test_without_plan_id_an_agent_with_two_plans_asks_which(
    make_market: MarketFactory,
) -> None:
    market = await make_market(register_agent=False)
    builder = ServiceClient(market.server.base_url, market.builder_key)
    try:
        owner = builder.address
        assert owner is not None
        plans = [
            await builder.register_plan(
                PlanMetadata(name=f"P{i}"),
                crypto_price([1_000_000], [owner], DEMO_TOKEN),
                fixed_credits(10, 1),
            )
            for i in range(2)
        ]
        async with fake_agent(None) as agent:
            market.agent_id = await builder.register_agent(
                AgentMetadata(name="Two plans"), AgentApi(endpoints=[{"POST": agent.url}]), plans
            )
            agent.card = {"agentId": market.agent_id, "schemes": ["svc:erc4337"]}
            failed, data = await query(market, agent.url, planId=None)
            assert agent.posts == []
    finally:
        await builder.aclose()
    assert failed and data["error"]["code"] == "missing_plan_id"
    assert all(plan in data["error"]["message"] for plan in plans)
    assert "planId" in data["error"]["hint"]


async def test_a_forged_receipt_is_flagged_and_the_service_balance_reported(
    make_market: MarketFactory,
) -> None:
    forged = {
        "success": True,
        "creditsRedeemed": "{'a': 1}",
        "remainingBalance": "-5",
        "payer": "0xattacker",
        "transaction": "0xabc",
        "network": "eip155:84532",
    }

    async def liar(request: web.Request) -> web.StreamResponse:
        return web.json_response({"answer": "x"}, headers=receipt_header(forged))

    async with registered_fake(make_market, liar) as (market, agent):
        failed, data = await query(market, agent.url)
    assert not failed, data
    receipt = data["receipt"]
    assert receipt["valid"] is False
    assert receipt["creditsRedeemed"] is None and receipt["remainingBalance"] is None
    assert receipt["payer"] is None
    warnings = " ".join(data["warnings"])
    assert "creditsRedeemed" in warnings and "remainingBalance" in warnings
    assert "0xattacker" in warnings
    assert data["balanceAfter"] == "10"  # the fake agent never settled: nothing was burned


async def test_a_receipt_for_another_payer_or_a_failed_settle_is_flagged(
    make_market: MarketFactory,
) -> None:
    other = "0x" + "ab" * 20
    receipt = {"success": False, "creditsRedeemed": 2, "remainingBalance": "3", "payer": other}

    async def odd(request: web.Request) -> web.StreamResponse:
        return web.json_response({"answer": "x"}, headers=receipt_header(receipt))

    async with registered_fake(make_market, odd) as (market, agent):
        failed, data = await query(market, agent.url)
    assert not failed, data
    got = data["receipt"]
    assert got["valid"] is False and got["success"] is False and got["payer"] is None
    assert got["creditsRedeemed"] == "2"  # an int is read as a count
    warnings = " ".join(data["warnings"])
    assert "successful settlement" in warnings and "not your account" in warnings
    assert "receipt says 3 credits remain; the service says 10" in warnings


async def test_an_oversized_answer_is_returned_cut_short_with_a_warning(
    make_market: MarketFactory,
) -> None:
    async def huge(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for _ in range(40):  # 2.5 MiB, no Content-Length: the reader must stop by itself
            await response.write(b"x" * 65536)
        await response.write_eof()
        return response

    async with registered_fake(make_market, huge) as (market, agent):
        failed, data = await query(market, agent.url)
    assert not failed, data
    assert data["answer"] == "x" * MAX_TEXT_CHARS
    assert any("cut short" in w and "1024 KiB" in w for w in data["warnings"])


async def test_an_announced_oversized_answer_is_refused_before_paying(
    make_market: MarketFactory,
) -> None:
    async with registered_fake(make_market, head_length=MAX_ANSWER_BYTES + 1) as (market, agent):
        by_head, head_data = await query(market, agent.url)
        assert agent.card is not None
        agent.card["maxAnswerBytes"] = 5 * MAX_ANSWER_BYTES
        by_card, card_data = await query(market, agent.url)
        assert agent.posts == [] and agent.tokens == []
    for failed, data in ((by_head, head_data), (by_card, card_data)):
        assert failed and data["error"]["code"] == "answer_too_large"
        assert "nothing was paid" in data["error"]["message"]
    assert str(MAX_ANSWER_BYTES + 1) in head_data["error"]["message"]
    assert await market.balance() == 10


def test_the_size_limit_is_stated_in_the_description() -> None:
    description = TOOLS["svc_queryAgent"].description
    assert "1 MiB" in description and "before paying" in description


async def test_a_slow_agent_times_out(make_market: MarketFactory) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(60)  # past the deadline: only the deadline ends it
        return web.json_response({})

    # 3 s: the service's calls before the agent (the balance, the token) fit in it on a busy
    # machine (0.5 s did not: the deadline then struck while the service answered)
    async with registered_fake(
        make_market, slow, subscriber_config=lambda m: {"requestTimeoutSecs": 3}
    ) as (market, agent):
        failed, data = await query(market, agent.url)
    assert failed and data["error"]["code"] == "agent_timeout"
    assert "svc_checkBalance" in data["error"]["hint"]


@pytest.mark.parametrize(
    "url",
    [
        "https://10.0.0.5/agent",
        "https://192.168.1.20/agent",
        "https://169.254.169.254/latest/meta-data",
        "https://0.0.0.0/agent",
        "https://[fe80::1]/agent",
        "https://[::ffff:10.0.0.1]/agent",
        "https://100.64.0.1/agent",
    ],
)
async def test_private_link_local_and_unspecified_addresses_are_refused(
    market: Market, url: str
) -> None:
    await market.order()
    failed, data = await query(market, url, agentId=market.agent_id)
    assert failed and data["error"]["code"] == "private_agent_address", data
    assert "allowedAgentHosts" in data["error"]["hint"]
    assert await market.balance() == 10


async def test_the_address_is_checked_after_dns_resolution(
    market: Market, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def internal(host: str, port: int) -> list[str]:
        return ["93.184.216.34", "10.9.8.7"] if host == "agent.example.com" else ["127.0.0.1"]

    monkeypatch.setattr(query_address, "resolver", internal)
    failed, data = await query(market, "https://agent.example.com/agent")
    assert failed and data["error"]["code"] == "private_agent_address"
    assert "10.9.8.7" in data["error"]["message"]


async def test_an_unresolvable_host_is_refused(
    market: Market, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def nowhere(host: str, port: int) -> list[str]:
        raise OSError("no such host")

    monkeypatch.setattr(query_address, "resolver", nowhere)
    failed, data = await query(market, "https://agent.invalid/agent")
    assert failed and data["error"]["code"] == "agent_unreachable"


@pytest.mark.parametrize("allow", [["10.0.0.0/8"], ["Agent.Internal"]])
async def test_the_allow_list_opens_a_private_host(
    monkeypatch: pytest.MonkeyPatch, allow: list[str]
) -> None:
    async def internal(host: str, port: int) -> list[str]:
        return ["10.1.2.3"]

    monkeypatch.setattr(query_address, "resolver", internal)
    core = cast(PluginCore, SimpleNamespace(config=PluginConfig(allowedAgentHosts=allow)))
    await query_address.check_agent_address(core, "https://agent.internal/agent")  # no refusal
    closed = cast(PluginCore, SimpleNamespace(config=PluginConfig()))
    with pytest.raises(query_address.ToolFailure) as refused:
        await query_address.check_agent_address(closed, "https://agent.internal/agent")
    assert refused.value.code == "private_agent_address"
    other = cast(
        PluginCore, SimpleNamespace(config=PluginConfig(allowedAgentHosts=["10.2.0.0/16"]))
    )
    with pytest.raises(query_address.ToolFailure):
        await query_address.check_agent_address(other, "https://agent.internal/agent")


def test_a_bad_allow_list_entry_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="allowedAgentHosts"):
        PluginConfig(allowedAgentHosts=["not a host!"])


async def test_spending_invalidates_the_balance_context(make_market: MarketFactory) -> None:
    market = await make_market(subscriber_config=lambda m: {"planId": m.plan_id})
    await market.order()
    assert ": 10 credits" in await market.subscriber_gw.context_text()
    failed, data = await query(market, market.endpoint.url)
    assert not failed, data
    # within the 60 s TTL: only the invalidation after spending can explain the new number
    assert ": 8 credits" in await market.subscriber_gw.context_text()


async def test_an_agent_id_the_service_does_not_know_is_refused(
    make_market: MarketFactory,
) -> None:
    async with registered_fake(make_market, card=False) as (market, agent):
        failed, data = await query(market, agent.url, agentId="987654321")
        assert agent.posts == []
    assert failed and data["error"]["code"] == "unknown_agent"
    assert "987654321" in data["error"]["message"]


async def test_a_dropped_connection_is_retried_with_its_key_then_unreachable(
    make_market: MarketFactory,
) -> None:
    """Every answer lost in flight: asked again with the same token and idempotency key, a
    bounded number of times (issue 46), then unreachable."""
    keys: list[str] = []

    async def drop(request: web.Request) -> web.StreamResponse:
        keys.append(request.headers.get("Idempotency-Key", ""))
        response = web.StreamResponse(headers={"Content-Length": "1000"})
        await response.prepare(request)
        await response.write(b"partial")
        assert request.transport is not None
        request.transport.close()
        return response

    async with registered_fake(make_market, drop) as (market, agent):
        failed, data = await query(market, agent.url)
        assert len(agent.posts) == MAX_ATTEMPTS
        assert len(set(agent.tokens)) == 1  # the same single-use token every time
    assert len(set(keys)) == 1 and keys[0].startswith("svc_")
    assert failed and data["error"]["code"] == "agent_unreachable"


@asynccontextmanager
async def pre_v3_service(base_url: str) -> AsyncIterator[str]:
    """A proxy on 127.0.0.1 in front of the sandbox that behaves like a deployment predating
    v3 tokens: it drops ``tokenVersion``, ``resource`` and ``httpVerb`` from token requests
    (the real service's validation pipe strips unknown fields the same way)."""
    origin = base_url.split("/api/v1")[0]

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "POST" and request.path.endswith("/x402/permissions"):
            doc = json.loads(body)
            doc.pop("tokenVersion", None)
            doc.pop("resource", None)
            doc.get("accepted", {}).get("extra", {}).pop("httpVerb", None)
            body = json.dumps(doc).encode()
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        async with (
            ClientSession() as session,
            session.request(
                request.method, origin + request.path_qs, data=body or None, headers=headers
            ) as answer,
        ):
            return web.Response(
                status=answer.status,
                body=await answer.read(),
                content_type=answer.content_type,
            )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    async with serve_app(app, shutdown_timeout=0.1) as proxy:
        yield f"{proxy}/api/v1"


async def test_a_service_that_only_issues_v2_tokens_is_a_warning_not_a_failure(
    make_market: MarketFactory, sandbox: SandboxServer
) -> None:
    async with pre_v3_service(sandbox.base_url) as old_service:
        market = await make_market(subscriber_config=lambda m: {"baseUrl": old_service})
        await market.order()
        failed, data = await query(market, market.endpoint.url)
    assert not failed, data
    assert data["tokenVersion"] == 2
    assert any("reusable (v2)" in w for w in data["warnings"])
    assert data["balanceAfter"] == "8"


@asynccontextmanager
async def two_plan_agent(
    market: Market, *, fiat: bool = False
) -> AsyncIterator[tuple[FakeAgent, list[str]]]:
    """A fake agent registered with two plans of the market's builder (crypto or card)."""
    builder = ServiceClient(market.server.base_url, market.builder_key)
    try:
        owner = builder.address
        assert owner is not None
        price = (
            fiat_price([2_000_000], [owner])
            if fiat
            else crypto_price([1_000_000], [owner], DEMO_TOKEN)
        )
        plans = [
            await builder.register_plan(PlanMetadata(name=f"P{i}"), price, fixed_credits(10, 1))
            for i in range(2)
        ]
        async with fake_agent(None) as agent:
            market.agent_id = await builder.register_agent(
                AgentMetadata(name="Two plans"), AgentApi(endpoints=[{"POST": agent.url}]), plans
            )
            yield agent, plans
    finally:
        await builder.aclose()


async def buy(market: Market, plan_id: str) -> None:
    result = await market.subscriber_gw.call_tool(
        "svc_orderPlan", {"planId": plan_id, "confirm": True}
    )
    assert not result.isError, result.structuredContent


async def test_the_cards_plan_is_used_among_several_and_an_explicit_plan_wins(
    make_market: MarketFactory,
) -> None:
    market = await make_market(register_agent=False)
    async with two_plan_agent(market) as (agent, plans):
        for plan in plans:
            await buy(market, plan)
        agent.card = {"agentId": market.agent_id, "planId": plans[1], "schemes": ["svc:erc4337"]}
        failed, by_card = await query(market, agent.url, planId=None)
        explicit_failed, explicit = await query(market, agent.url, planId=plans[0])
    assert not failed and not explicit_failed, (by_card, explicit)
    assert by_card["planId"] == plans[1]
    assert explicit["planId"] == plans[0]
    assert any(f"names plan {plans[1]}" in w for w in explicit["warnings"])


async def test_a_card_paid_agent_is_paid_by_card_without_being_told(
    make_market: MarketFactory,
) -> None:
    market = await make_market(
        register_agent=False, subscriber_config=lambda m: {"defaultSpendingLimitCents": 4321}
    )
    async with two_plan_agent(market, fiat=True) as (agent, plans):
        agent.card = {
            "agentId": market.agent_id,
            "planId": plans[0],
            "schemes": ["svc:card-delegation"],
        }
        failed, data = await query(market, agent.url, planId=None)
        wrong, refused = await query(market, agent.url, planId=None, paymentType="crypto")
        no_card, missing = await query(market, agent.url, planId=None, paymentMethodId="pm_nope")
        assert len(agent.tokens) == 1
    assert not failed, data
    (token,) = agent.tokens
    decoded = decode_access_token(token) or {}
    assert decoded["accepted"]["scheme"] == "svc:card-delegation"
    assert wrong and refused["error"]["code"] == "payment_type_mismatch"
    assert "paymentType: fiat" in refused["error"]["hint"]
    assert no_card and missing["error"]["code"] == "payment_method_not_found"
    subscriber = ServiceClient(market.server.base_url, market.subscriber_key)
    try:
        delegations = await subscriber._request("GET", "delegation")
    finally:
        await subscriber.aclose()
    listed = delegations if isinstance(delegations, list) else delegations["delegations"]
    assert [int(d["spendingLimitCents"]) for d in listed] == [4321]


async def test_a_host_resolving_to_local_use_nat64_of_a_private_address_is_refused(
    make_market: MarketFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 16 #11: 64:ff9b:1::a00:5 is 10.0.0.5 behind a local-use NAT64 prefix."""

    async def nat64(host: str, port: int) -> list[str]:
        return ["64:ff9b:1::a00:5"] if host == "agent.example.com" else ["127.0.0.1"]

    market = await make_market()
    await market.order()
    monkeypatch.setattr(query_address, "resolver", nat64)
    failed, data = await query(market, "https://agent.example.com/agent", agentId=market.agent_id)
    assert failed and data["error"]["code"] == "private_agent_address", data
    assert "carries the IPv4 address 10.0.0.5 (local-use NAT64)" in data["error"]["message"]
    assert "allowedAgentHosts" in data["error"]["hint"]
    assert await market.balance() == 10
