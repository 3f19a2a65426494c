"""``svc pay <url>`` as a person types it, against a builder's route sold by the payment
middleware on the session's sandbox: it reads the 402, checks the URL is the agent's registered
endpoint, shows the price and asks (or ``--yes`` / ``--max-price``), orders the plan when the
balance is short, pays with a single-use token and prints the answer and the receipt. A
connection dropped after the seller answered is retried with the same token and the same
``Idempotency-Key``, and the seller's replay is not charged twice."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from svc_gateway.sandbox import SandboxServer
from svc_gateway.selling import RouteConfig, build_payment_app
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.service.pricing import erc20_price, fixed_credits
from tests.conftest import USDC

from .conftest import Svc


@dataclass
class Route:
    """A builder's app selling ``POST /ask`` (1 credit of a 100-credit, 1 USDC plan), the
    registered endpoint, and ``POST /elsewhere`` gated the same way but never registered."""

    url: str
    unregistered: str
    plan_id: str
    agent_id: str
    base_url: str
    seen_keys: list[str | None] = field(default_factory=list)
    drop_next_paid: list[bool] = field(default_factory=list)
    unpaid_with_key: int = 0

    async def ledger(self, address: str) -> dict[str, int]:
        async with httpx.AsyncClient(base_url=self.base_url) as http:
            data = (await http.get(f"/sandbox/ledger/{self.plan_id}/{address}")).json()
        return {k: int(data[k]) for k in ("granted", "burned", "balance")}


@pytest.fixture
async def route(
    sandbox: SandboxServer, builder: dict[str, str], tmp_path: Path
) -> AsyncIterator[Route]:
    client = ServiceClient(sandbox.base_url, builder["apiKey"], environment="local")
    holder: list[Route] = []

    async def ask(request: web.Request) -> web.Response:
        question = (await request.json()).get("question", "")
        return web.json_response({"answer": f"You asked {len(question.split())} words."})

    @web.middleware
    async def drop_once(request: web.Request, handler: web.Handler) -> web.StreamResponse:
        """A connection that drops after the seller answered: what the network can do and a
        real seller cannot be told to (the answer is made and settled, then lost)."""
        route = holder[0]
        if request.headers.get("payment-signature"):
            route.seen_keys.append(request.headers.get("Idempotency-Key"))
        elif "Idempotency-Key" in request.headers:
            route.unpaid_with_key += 1
        response = await handler(request)
        if request.headers.get("payment-signature") and route.drop_next_paid:
            route.drop_next_paid.pop()
            assert request.transport is not None
            request.transport.close()
        return response

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound first: the agent registers the route's real URL
    origin = f"http://127.0.0.1:{sock.getsockname()[1]}"
    ids = await client.register_agent_and_plan(
        AgentMetadata(name="Asker"),
        AgentApi(endpoints=[{"POST": f"{origin}/ask"}, {"POST": f"{origin}/anon"}]),
        PlanMetadata(name="Starter"),
        erc20_price([1_000_000], [builder["address"]], USDC),
        fixed_credits(100, 1),
    )
    await client.aclose()
    holder.append(
        Route(f"{origin}/ask", f"{origin}/elsewhere", ids.plan_id, ids.agent_id, sandbox.base_url)
    )
    settings = {
        "svcApiKey": builder["apiKey"],
        "environment": "local",
        "baseUrl": sandbox.base_url,
        "settleQueuePath": str(tmp_path / "queue.json"),
    }
    config = RouteConfig(plan_id=ids.plan_id, agent_id=ids.agent_id)
    # /anon's route names no agent (as docs/selling.md's app.py): its 402 carries none
    anon = RouteConfig(plan_id=ids.plan_id)
    routes = {"POST /ask": config, "POST /elsewhere": config, "POST /anon": anon}
    app = build_payment_app(routes, settings)
    app.middlewares.insert(0, drop_once)
    app.router.add_post("/ask", ask)
    app.router.add_post("/elsewhere", ask)
    app.router.add_post("/anon", ask)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield holder[0]
    finally:
        await runner.cleanup()


async def test_pay_orders_the_plan_pays_and_prints_the_answer_and_the_receipt(
    profiles: Svc, route: Route, subscriber: dict[str, str]
) -> None:
    svc = profiles
    paid = await svc.json(
        "--profile", "subscriber", "pay", route.url, "--data", '{"question": "how are you"}',
        "--yes",
    )  # fmt: skip
    assert paid["answer"] == {"answer": "You asked 3 words."}
    assert paid["receipt"]["creditsRedeemed"] == "1" and paid["receipt"]["valid"] is True
    assert paid["ordered"]["planId"] == route.plan_id  # the balance was 0: bought first
    assert paid["balanceAfter"] == "99" and paid["agentId"] == route.agent_id
    # again, approved by a cap: the balance covers it, so it costs 1 credit (0.01 USD)
    again = await svc.ok(
        "--profile", "subscriber", "pay", route.url, "--data", '{"question": "hi"}',
        "--max-price", "$0.05",
    )  # fmt: skip
    assert "You asked 1 words." in again.out
    assert f"Paid 1 credit of plan {route.plan_id}" in again.out
    assert "balance 98 credits" in again.out and "1 credits" not in again.out
    ledger = await route.ledger(subscriber["address"])
    assert ledger == {"granted": 100, "burned": 2, "balance": 98}


async def test_pay_shows_the_price_and_pays_nothing_unless_approved_for_a_registered_url(
    profiles: Svc, route: Route, subscriber: dict[str, str]
) -> None:
    svc = profiles
    declined, over_cap, unregistered = await asyncio.gather(
        svc("--profile", "subscriber", "pay", route.url, stdin="n\n"),
        svc("--profile", "subscriber", "pay", route.url, "--max-price", "0.50 USDC"),
        svc("--profile", "subscriber", "pay", route.unregistered, "--yes"),
    )
    assert declined.code == 1 and declined.out == ""
    assert "buying the plan first for 1 USDC" in declined.err, declined.err
    assert "Not paid" in declined.err and "--yes" in declined.err
    assert over_cap.code == 1 and "more than --max-price 0.50 USD" in over_cap.err
    # the route answers 402 too, but the agent never registered it: checked as svc_queryAgent
    assert unregistered.code == 1 and "agent_url_not_registered" in unregistered.err
    assert route.url in unregistered.err and "nothing was paid" in unregistered.err
    ledger = await route.ledger(subscriber["address"])
    assert ledger == {"granted": 0, "burned": 0, "balance": 0}  # nothing ordered, nothing paid


async def test_a_dropped_answer_is_asked_again_with_the_same_token_and_key(
    profiles: Svc, route: Route, subscriber: dict[str, str]
) -> None:
    route.drop_next_paid.append(True)
    paid = await profiles.json(
        "--profile", "subscriber", "pay", route.url, "--data", '{"question": "a b"}', "--yes",
        "--idempotency-key", "order-42",
    )  # fmt: skip
    assert paid["answer"] == {"answer": "You asked 2 words."}
    assert route.seen_keys == ["order-42", "order-42"]  # the retry carried the same key
    assert route.unpaid_with_key == 0  # the 402 probe carries none: a seller keeps no 402 for it
    assert paid["idempotencyKey"] == "order-42"
    # the seller replayed the answer it was paid for: one credit, not two
    assert await route.ledger(subscriber["address"]) == {"granted": 100, "burned": 1, "balance": 99}


async def test_print_header_gives_curl_a_header_that_pays_once_even_when_the_402_names_no_agent(
    profiles: Svc, route: Route, subscriber: dict[str, str]
) -> None:
    anon = route.url.replace("/ask", "/anon")  # the service's record says which agent it is
    run = await profiles.ok("--profile", "subscriber", "pay", anon, "--print-header", "-y")
    name, _, token = run.out.strip().partition(": ")
    assert name == "payment-signature" and len(token) > 100
    async with httpx.AsyncClient() as http:
        answered = await http.post(
            anon, json={"question": "x"}, headers={"payment-signature": token}
        )
    assert answered.status_code == 200 and "payment-response" in answered.headers
    assert await route.ledger(subscriber["address"]) == {"granted": 100, "burned": 1, "balance": 99}
