"""Kill the service mid-burst (issue 10 "Done when"): the ledger still balances.

The sandbox runs on a file database; it is stopped while a burst of paid requests is in
progress and started again on the same port and file. Then: granted = balance + burned, every
answer given was paid exactly once (by its receipt, or later from the settle queue), and no
request whose work failed or was refused was charged."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from svc_gateway.sandbox import SandboxServer, start_sandbox
from tests.support.market import MarketFactory

GRANTED = 60


class RestartableSandbox:
    def __init__(self, db: Path) -> None:
        self.db = str(db)
        self.server: SandboxServer | None = None
        self.port = 0

    async def start(self) -> SandboxServer:
        self.server = await start_sandbox("127.0.0.1", self.port, self.db)
        self.port = int(urlsplit(self.server.base_url).port or 0)
        return self.server

    async def stop(self) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            await server.close()


@pytest.fixture
async def restartable(tmp_path: Path) -> AsyncIterator[RestartableSandbox]:
    sandbox = RestartableSandbox(tmp_path / "service.db")
    await sandbox.start()
    yield sandbox
    await sandbox.stop()


@pytest.fixture
async def sandbox(restartable: RestartableSandbox) -> SandboxServer:
    """The market fixtures' sandbox, replaced by one that can be killed and restarted."""
    assert restartable.server is not None
    return restartable.server


async def test_killing_the_service_mid_burst_loses_and_double_burns_nothing(
    make_market: MarketFactory, restartable: RestartableSandbox
) -> None:
    market = await make_market(credits=GRANTED, per_request=1)
    flow = market.endpoint.flow
    flow.settler.backoff = (0.0, 0.0)
    await market.order()
    token = await market.token()
    limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)

    async def one(http: httpx.AsyncClient, i: int) -> httpx.Response | None:
        try:
            return await http.post(
                market.endpoint.url,
                json={"prompt": f"question {i}"},
                headers={"payment-signature": token},
            )
        except httpx.HTTPError:
            return None  # the endpoint itself never went away; counted below

    async def kill_after_some_settles() -> None:
        for _ in range(1000):  # bounded: 20 s
            if flow.stats.settled >= 10:
                break
            await asyncio.sleep(0.02)
        await restartable.stop()

    async with httpx.AsyncClient(limits=limits, timeout=60) as http:
        killer = asyncio.create_task(kill_after_some_settles())
        responses = await asyncio.gather(*(one(http, i) for i in range(GRANTED)))
        await killer
    assert all(r is not None for r in responses)
    answered: list[Any] = [r for r in responses if r is not None]
    statuses = Counter(r.status_code for r in answered)
    assert set(statuses) <= {200, 402, 503}, statuses
    assert statuses[503] > 0  # the kill landed mid-burst
    delivered = [r for r in answered if r.status_code == 200]
    with_receipt = [r for r in delivered if "payment-response" in r.headers]

    await restartable.start()  # same port, same database
    await flow.seller.runtime.run(flow.settler.drain_queue())
    for _ in range(500):  # bounded: 10 s
        if flow.stats.settle_queue == 0:
            break
        await flow.seller.runtime.run(flow.settler.drain_queue())
        await asyncio.sleep(0.02)
    assert flow.stats.settle_queue == 0
    assert flow.stats.settle_lost == 0

    balance = await market.balance()
    burned = GRANTED - balance
    # every answer given was paid exactly once, by its receipt or from the queue
    assert burned == len(delivered)
    assert flow.stats.settled == len(delivered)
    assert flow.stats.settle_recovered == len(delivered) - len(with_receipt)
    assert flow.stats.credits_settled == burned
    # conservation, and no request refused or unavailable was charged
    assert balance + burned == GRANTED
    assert burned + statuses[402] + statuses[503] == GRANTED
