"""Redis stopped mid-run under a seller with ``stateUrl`` (issue 17): admission fails closed,
settles made meanwhile are kept locally and pushed back, nothing is settled twice."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import httpx

from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.sandbox import SandboxServer
from svc_gateway.sandbox.context import STORE
from svc_gateway.selling.handlers import default_handler
from tests.support.fixtures import no_top_up
from tests.support.market import Market, MarketFactory, refuse_500
from tests.support.redis_server import RedisServer

GRANTED = 30


class GatedAgent:
    """The builder's agent: counts its runs; prompts starting ``slow`` wait for the gate."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.gate = threading.Event()

    async def __call__(self, request: dict[str, Any]) -> Any:
        self.runs.append(request["prompt"])
        if request["prompt"].startswith("slow"):
            await asyncio.to_thread(self.gate.wait, 30)
        return await default_handler(request)


async def burst(market: Market, token: str, prefix: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60) as http:
        return list(
            await asyncio.gather(
                *(
                    http.post(
                        market.endpoint.url,
                        json={"prompt": f"{prefix} {i}"},
                        headers={"payment-signature": token},
                    )
                    for i in range(n)
                )
            )
        )


def burned(sandbox: SandboxServer, plan_id: str) -> list[str]:
    rows = sandbox.app[STORE].all("SELECT request_id FROM burns WHERE plan_id = ?", (plan_id,))
    return [row["request_id"] for row in rows]


async def test_redis_stopped_mid_run_fails_closed_and_settles_everything_once(
    make_market: MarketFactory, redis_server: RedisServer, sandbox: SandboxServer
) -> None:
    agent = GatedAgent()

    def install(gateway: ReferenceGateway) -> None:
        gateway.agent_handler = agent  # type: ignore[attr-defined]

    market = await make_market(
        credits=GRANTED,
        per_request=1,
        subscriber_config=no_top_up,
        faults=True,
        builder_config={"stateUrl": redis_server.url},
        configure_builder=install,
    )
    flow = market.endpoint.flow
    flow.settler.backoff = (0.0, 0.0)
    assert market.transport is not None
    await market.order()
    token = await market.token()

    paid = await burst(market, token, "before", 5)
    assert all(r.status_code == 200 and "payment-response" in r.headers for r in paid)

    # five requests admitted and working when Redis stops and settles fail: their answers are
    # delivered, their settles owed, kept in the local spool while Redis is away
    working = asyncio.create_task(burst(market, token, "slow", 5))
    for _ in range(500):  # bounded: 10 s
        if sum(p.startswith("slow") for p in agent.runs) == 5:
            break
        await asyncio.sleep(0.02)
    market.transport.always["x402/settle"] = refuse_500
    redis_server.stop()
    agent.gate.set()
    delivered = await working
    assert all(r.status_code == 200 and "payment-response" not in r.headers for r in delivered)
    assert flow.stats.settle_deferred == 5

    # while Redis is away: no admission, so no answer: 503 before the handler, nothing charged
    runs = len(agent.runs)
    refused = await burst(market, token, "during", 5)
    assert Counter(r.status_code for r in refused) == {503: 5}
    assert all("shared billing state is unreachable" in r.json()["message"] for r in refused)
    assert all(r.headers["Retry-After"] == "5" for r in refused)
    assert len(agent.runs) == runs
    assert len(burned(sandbox, market.plan_id)) == 5

    # both come back (Redis empty: no persistence); the spool is pushed and settled once
    redis_server.start()
    del market.transport.always["x402/settle"]
    for _ in range(100):  # bounded
        await flow.seller.runtime.run(flow.settler.drain_queue())
        if flow.stats.settle_queue == 0:
            break
        await asyncio.sleep(0.02)
    assert flow.stats.settle_queue == 0 and flow.stats.settle_recovered == 5
    after = await burst(market, token, "after", GRANTED)  # more than what is left
    statuses = Counter(r.status_code for r in after)
    assert statuses == {200: GRANTED - 10, 402: 10}

    requests = burned(sandbox, market.plan_id)
    assert len(requests) == GRANTED and len(set(requests)) == GRANTED  # nothing settled twice
    assert flow.stats.settled == GRANTED and flow.stats.settle_lost == 0
    assert await market.balance() == 0  # conservation: granted = balance + burned
    assert len(agent.runs) == GRANTED  # every run was paid; no refused request ran
