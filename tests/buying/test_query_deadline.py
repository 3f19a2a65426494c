"""svc_queryAgent's one deadline (issues 14 and 16 #10): ``requestTimeoutSecs`` bounds the whole
query (DNS, agent card, origin card, HEAD, the service's calls, the paid request), and the
error names whom it waited for and whether anything was paid.

The agents here are raw asyncio servers on 127.0.0.1 that do what no HTTP framework does on
purpose: accept a connection and never answer, or send one byte every 0.6 s (each byte resets a
per-read timeout, so only an overall deadline ends the wait). The guard around each call
(``requestTimeoutSecs`` + 1 s) is the promise of the issue, not a speed measurement."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import ClientSession, web

from svc_gateway.buying import addresses as query_address
from svc_gateway.hosts.reference import repl
from svc_gateway.interop import agent_card
from svc_gateway.sandbox import SandboxServer
from tests.support import serve_app
from tests.support.market import Market, MarketFactory

DEADLINE = 1.0
#: what each request gets: "silent" (never a byte), "drip" (a byte every 0.6 s, for ever),
#: "404", or "ok" (a JSON answer with no receipt)
Modes = dict[str, str]


@dataclass
class RawAgent:
    url: str = ""
    seen: list[str] = field(default_factory=list)


async def _drip(writer: asyncio.StreamWriter) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99\r\n\r\n"
    for byte in head + b"{" + b" " * 10_000:
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0.6)


@asynccontextmanager
async def raw_agent(modes: Modes) -> AsyncIterator[RawAgent]:
    """An agent at ``/agent`` whose answers are chosen by ``"METHOD path"`` in ``modes``
    (anything not named gets a 404)."""
    agent = RawAgent()
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, path = head.decode("latin-1").split(" ", 2)[:2]
            agent.seen.append(f"{method} {path}")
            mode = modes.get(f"{method} {path}", "404")
            if mode == "silent":
                await asyncio.sleep(3600)
            elif mode == "drip":
                await _drip(writer)
            else:
                status = "200 OK" if mode == "ok" else "404 Not Found"
                body = b'{"answer": "raw"}' if mode == "ok" else b""
                writer.write(
                    f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    agent.url = f"http://127.0.0.1:{port}/agent"
    try:
        yield agent
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        for task in list(tasks):
            with contextlib.suppress(BaseException):
                await task
        await server.wait_closed()


async def registered_market(make_market: MarketFactory, url: str) -> Market:
    market = await make_market(
        register_agent=False, subscriber_config=lambda m: {"requestTimeoutSecs": DEADLINE}
    )
    await market.register_agent(agent_url=url)
    await market.order()
    return market


async def query_within_deadline(market: Market, url: str, **extra: Any) -> dict[str, Any]:
    """The tool's error, which must come within ``requestTimeoutSecs`` + 1 s."""
    params = {"agentUrl": url, "prompt": "hello", **extra}
    call = market.subscriber_gw.call_tool("svc_queryAgent", params)
    result = await asyncio.wait_for(call, DEADLINE + 1)
    assert result.isError, result.structuredContent
    error: dict[str, Any] = result.structuredContent["error"]
    return error


CARD = "GET /agent/.well-known/agent.json"
ORIGIN_CARD = "GET /.well-known/agent.json"


@pytest.mark.parametrize(
    ("modes", "by_id"),
    [
        pytest.param({CARD: "silent", ORIGIN_CARD: "silent"}, False, id="never-answers"),
        pytest.param({CARD: "drip"}, False, id="card-drips"),
        pytest.param({ORIGIN_CARD: "drip"}, False, id="origin-card-drips"),
        pytest.param({"HEAD /agent": "drip"}, True, id="head-drips"),
        pytest.param({"HEAD /agent": "silent"}, True, id="head-never-answers"),
    ],
)
async def test_an_agent_that_hangs_before_payment_is_reported_within_the_deadline(
    make_market: MarketFactory, modes: Modes, by_id: bool
) -> None:
    async with raw_agent(modes) as agent:
        market = await registered_market(make_market, agent.url)
        extra = {"agentId": market.agent_id} if by_id else {}
        error = await query_within_deadline(market, agent.url, **extra)
        assert not any(seen.startswith("POST") for seen in agent.seen)
    assert error["code"] == "agent_timeout"
    assert error["message"] == (
        f"The agent at {agent.url} did not answer within 1 s; nothing was paid"
    )
    assert "requestTimeoutSecs" in error["hint"]
    assert await market.balance() == 10


async def test_an_agent_that_never_answers_the_paid_request_does_not_say_nothing_was_paid(
    make_market: MarketFactory,
) -> None:
    async with raw_agent({"POST /agent": "silent"}) as agent:
        market = await registered_market(make_market, agent.url)
        error = await query_within_deadline(market, agent.url, agentId=market.agent_id)
        assert "POST /agent" in agent.seen
    assert error["code"] == "agent_timeout"
    assert error["message"].startswith(f"The agent at {agent.url} did not answer within 1 s")
    assert "nothing was paid" not in error["message"]


async def test_a_dns_lookup_that_hangs_is_named_and_nothing_is_paid(
    make_market: MarketFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resolver that never returns cannot be made on demand: it is swapped in."""

    async def hang(host: str, port: int) -> list[str]:
        await asyncio.sleep(3600)
        return []

    market = await registered_market(make_market, "https://agent.example.com/agent")
    monkeypatch.setattr(query_address, "resolver", hang)
    error = await query_within_deadline(market, "https://agent.example.com/agent")
    assert error["code"] == "agent_unreachable"
    assert error["message"] == (
        "The agent's host agent.example.com could not be resolved within 1 s; nothing was paid"
    )
    assert await market.balance() == 10


@asynccontextmanager
async def service_hanging_on(base_url: str, fragment: str) -> AsyncIterator[str]:
    """A proxy on 127.0.0.1 in front of the sandbox that never answers requests whose path
    contains ``fragment`` (and forwards the rest)."""
    origin = base_url.split("/api/v1")[0]

    async def forward(request: web.Request) -> web.StreamResponse:
        if fragment in request.path:
            await asyncio.sleep(3600)
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        async with (
            ClientSession() as session,
            session.request(
                request.method,
                origin + request.path_qs,
                data=await request.read() or None,
                headers=headers,
            ) as answer,
        ):
            return web.Response(
                status=answer.status, body=await answer.read(), content_type=answer.content_type
            )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    async with serve_app(app, shutdown_timeout=0.1) as proxy:
        yield f"{proxy}/api/v1"


async def test_a_service_that_hangs_is_named_not_the_agent(
    make_market: MarketFactory, sandbox: SandboxServer
) -> None:
    async with (
        raw_agent({"POST /agent": "ok"}) as agent,
        service_hanging_on(sandbox.base_url, "/x402/permissions") as slow_service,
    ):
        market = await make_market(
            register_agent=False,
            subscriber_config=lambda m: {"requestTimeoutSecs": DEADLINE, "baseUrl": slow_service},
        )
        await market.register_agent(agent_url=agent.url)
        await market.order()
        error = await query_within_deadline(market, agent.url, agentId=market.agent_id)
        assert "POST /agent" not in agent.seen
    assert error["code"] == "service_timeout"
    assert error["message"] == "The service did not answer within 1 s; nothing was paid"
    assert await market.balance() == 10


async def test_a_card_that_never_comes_leaves_the_deadline_to_the_paid_request(
    make_market: MarketFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The card is optional: its own bound (``CARD_SECS``, shortened here) ends the wait for
    it, and the paid request is sent within ``requestTimeoutSecs``."""
    monkeypatch.setattr(agent_card, "CARD_SECS", 0.3, raising=False)
    modes = {CARD: "silent", ORIGIN_CARD: "silent", "POST /agent": "ok"}
    async with raw_agent(modes) as agent:
        market = await make_market(
            register_agent=False, subscriber_config=lambda m: {"requestTimeoutSecs": 3.0}
        )
        await market.register_agent(agent_url=agent.url)
        await market.order()
        params = {"agentUrl": agent.url, "prompt": "hello", "agentId": market.agent_id}
        call = market.subscriber_gw.call_tool("svc_queryAgent", params)
        result = await asyncio.wait_for(call, 3.0 + 1)
        assert "POST /agent" in agent.seen
    assert not result.isError, result.structuredContent
    assert result.structuredContent["answer"] == {"answer": "raw"}


async def test_the_reference_chat_says_it_waits_for_a_slow_agent(
    make_market: MarketFactory,
) -> None:
    async with raw_agent({"POST /agent": "silent"}) as agent:
        market = await registered_market(make_market, agent.url)
        line = f'svc_queryAgent {{"agentUrl": "{agent.url}", "prompt": "hello", '
        line += f'"agentId": "{market.agent_id}"}}\n'
        printed: list[str] = []
        chat = repl(
            market.subscriber_gw, io.StringIO(line), printed.append, prompt=False, slow_secs=0.2
        )
        assert await asyncio.wait_for(chat, DEADLINE + 5) == 0
    assert printed[0] == "waiting for the agent, up to 1 s…"
    assert printed[1].startswith("error [agent_timeout]: The agent at")
    assert len(printed) == 2
