"""Several seller replicas sharing one Redis (issue 17), end to end over loopback: real
redis-server, real sandbox, endpoint processes started and killed by pid."""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from svc_gateway.encoding import decode_b64_json
from svc_gateway.sandbox import SandboxServer
from svc_gateway.sandbox.context import STORE
from svc_gateway.selling.state.redis_store import SharedStats, connect_client, seller_prefix
from svc_gateway.service.client import ServiceClient
from tests.support.cutting import CutProxy
from tests.support.fixtures import no_top_up
from tests.support.market import FaultProxy, Market, MarketFactory, refuse_500
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[3]
READY_SECS = 60.0


class Replica:
    """One ``tests.support.replica`` process."""

    def __init__(self, proc: subprocess.Popen[str], name: str) -> None:
        self.proc = proc
        self.name = name
        self.url = ""

    def read_line(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    data: dict[str, Any] = json.loads(line)
                    return data
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.name} exited with {self.proc.returncode}")
        raise RuntimeError(f"replica {self.name} did not answer within {timeout:.0f} s")

    def stop(self) -> dict[str, int]:
        """SIGTERM; the replica closes (pushing its counters) and prints its stats."""
        self.proc.terminate()
        try:
            stats: dict[str, int] = self.read_line(30)["stats"]
        finally:
            self.proc.wait(timeout=30)
        return stats

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no clean-up at all
        self.proc.wait(timeout=30)


Spawn = Callable[..., Awaitable[list[Replica]]]


def launch(name: str, args: list[str], env: dict[str, str], errors: Path) -> Replica:
    """Start one replica; its stderr goes to ``errors`` (read when a test fails)."""
    with errors.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.replica", *args],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            cwd=ROOT,
        )
    return Replica(proc, name)


@pytest.fixture
async def spawn(tmp_path: Path, redis_server: RedisServer) -> AsyncIterator[Spawn]:
    started: list[Replica] = []

    async def factory(market: Market, service: str, n: int = 2, **options: float) -> list[Replica]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "plugin"), str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
        )
        replicas = []
        for _ in range(n):
            name = f"r{len(started)}"
            args = [
                "--service", service, "--key", market.builder_key, "--plan", market.plan_id,
                "--agent", market.agent_id, "--state-url", redis_server.url,
                "--public-url", market.endpoint.url, "--config-dir", str(tmp_path / name),
                "--handler-log", str(tmp_path / "handler.log"),
            ]  # fmt: skip
            for option, value in options.items():
                args += [f"--{option.replace('_', '-')}", str(value)]
            replica = launch(name, args, env, tmp_path / f"{name}.err")
            started.append(replica)
            replicas.append(replica)
        for replica in replicas:
            replica.url = (await asyncio.to_thread(replica.read_line, READY_SECS))["url"]
        return replicas

    yield factory
    for replica in started:
        if replica.proc.poll() is None:
            replica.kill()
        if replica.proc.stdout is not None:
            replica.proc.stdout.close()


def handler_runs(tmp_path: Path) -> list[str]:
    path = tmp_path / "handler.log"
    return path.read_text().splitlines() if path.exists() else []


def burns(sandbox: SandboxServer, plan_id: str) -> list[str | None]:
    rows = sandbox.app[STORE].all("SELECT request_id FROM burns WHERE plan_id = ?", (plan_id,))
    return [row["request_id"] for row in rows]


async def post_all(
    urls: list[str], token: str, n: int, prefix: str = "question"
) -> list[httpx.Response | None]:
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:

        async def one(i: int) -> httpx.Response | None:
            try:
                return await http.post(
                    urls[i % len(urls)],
                    json={"prompt": f"{prefix} {i}"},
                    headers={"payment-signature": token},
                )
            except httpx.HTTPError:
                return None

        return await asyncio.gather(*(one(i) for i in range(n)))


def payer(market: Market) -> str:
    return market.subscriber_address.lower()


async def test_two_replicas_on_one_redis_answer_exactly_what_the_credits_pay_for(
    make_market: MarketFactory,
    spawn: Spawn,
    sandbox: SandboxServer,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    market = await make_market(credits=150, per_request=1, subscriber_config=no_top_up)
    await market.order()
    token = await market.token()
    # a budget no load reaches: this test counts receipts, and a settle past the budget
    # answers with its receipt deferred (two xdist workers under coverage reached 2 s)
    a, b = await spawn(market, sandbox.base_url, handler_delay=0.05, paid_budget=30.0)

    responses = await post_all([a.url, b.url], token, 200)
    stats = [await asyncio.to_thread(r.stop) for r in (a, b)]

    assert all(r is not None for r in responses)
    answered = [r for r in responses if r is not None]
    assert Counter(r.status_code for r in answered) == {200: 150, 402: 50}
    assert all(s["requests"] > 0 and s["settled"] > 0 for s in stats)  # both replicas served
    refused = [r.json()["reason"] for r in answered if r.status_code == 402]
    assert all("insufficient credits" in reason for reason in refused)
    # the 50 refusals came before the handler: the work was done 150 times, not 200
    assert len(handler_runs(tmp_path)) == 150
    receipts = [decode_b64_json(r.headers.get("payment-response")) for r in answered]
    paid = [r for r in receipts if r is not None]
    assert sorted(int(r["remainingBalance"]) for r in paid) == list(range(150))
    # the ledger: 150 burns, each on its own agentRequestId; conservation
    burned = burns(sandbox, market.plan_id)
    assert len(burned) == 150 and len(set(burned)) == 150 and None not in burned
    assert await market.balance() == 0
    assert await market.balance() + len(burned) == 150
    # the shared counters add up both replicas
    client = connect_client(redis_server.url)
    try:
        shared = SharedStats(client, where="test", prefix=seller_prefix(market.builder_address))
        totals = await shared.totals()
    finally:
        await client.aclose()
    assert totals["requests"] == 200 and totals["settled"] == 150
    assert totals["refused"] == 50 and totals["credits_settled"] == 150
    acct = f"{seller_prefix(market.builder_address)}acct:{{{market.plan_id}|{payer(market)}}}"
    client = connect_client(redis_server.url)
    try:
        assert await client.hmget(acct, "balance", "inflight") == [b"0", b"0"]
    finally:
        await client.aclose()
    assert sum(s["settled"] for s in stats) == 150


async def test_a_replica_killed_mid_burst_loses_nothing_and_locks_no_one_out(
    make_market: MarketFactory,
    spawn: Spawn,
    sandbox: SandboxServer,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    granted, claim_ttl = 40, 3.0
    market = await make_market(credits=granted, per_request=1, subscriber_config=no_top_up)
    await market.order()
    token = await market.token()
    proxy = FaultProxy(sandbox.origin)
    await proxy.start()
    client = connect_client(redis_server.url)
    order = f"{seller_prefix(market.builder_address)}settle:order"  # the seller's owed settles
    try:
        a, b = await spawn(
            market, proxy.base_url, handler_delay=0.3, claim_ttl=claim_ttl, lease=1.5
        )
        proxy.always["x402/settle"] = refuse_500  # the settle outage
        first = await post_all([a.url, b.url], token, 20)
        assert all(r is not None and r.status_code == 200 for r in first)
        assert not any(r is not None and "payment-response" in r.headers for r in first)
        assert await client.zcard(order) == 20  # every delivered answer is owed

        # A is killed while five of its handlers run (admitted, claims held, nothing delivered)
        doomed = asyncio.create_task(post_all([a.url], token, 5, prefix="doomed"))
        for _ in range(500):  # bounded: 10 s
            if len(handler_runs(tmp_path)) >= 25:
                break
            await asyncio.sleep(0.02)
        assert len(handler_runs(tmp_path)) == 25
        a.kill()
        killed_at = time.monotonic()
        assert all(r is None for r in await doomed)  # no answer: never charged

        del proxy.always["x402/settle"]  # the service is back: B retries every owed settle
        for _ in range(1000):  # bounded: 20 s
            if await client.zcard(order) == 0:
                break
            await asyncio.sleep(0.02)
        assert await client.zcard(order) == 0
        burned = burns(sandbox, market.plan_id)
        # each of the 20 delivered answers was paid once, on its original agentRequestId
        assert len(burned) == 20 and len(set(burned)) == 20 and None not in burned
        assert await market.balance() == granted - 20

        # the killed replica's five claims expire: the payer can spend everything left
        await asyncio.sleep(max(0.0, killed_at + claim_ttl + 0.2 - time.monotonic()))
        last = await post_all([b.url], token, 20, prefix="after")
        assert [r.status_code for r in last if r is not None] == [200] * 20
        assert all("payment-response" in r.headers for r in last if r is not None)
        # and the shared book is square: nothing left in flight, the balance as the ledger's
        acct = f"{seller_prefix(market.builder_address)}acct:{{{market.plan_id}|{payer(market)}}}"
        assert await client.hmget(acct, "balance", "inflight") == [b"0", b"0"]
        stats = await asyncio.to_thread(b.stop)
    finally:
        await client.aclose()
        await proxy.close()
    assert stats["settle_recovered"] == 20  # its own ten and the dead replica's ten
    assert stats["settle_lost"] == 0
    burned = burns(sandbox, market.plan_id)
    assert len(burned) == granted and len(set(burned)) == granted
    assert await market.balance() == 0  # conservation: granted = balance + burned
    assert len(handler_runs(tmp_path)) == 45  # 40 paid answers; 5 killed mid-work, unpaid


async def test_two_replicas_serve_a_topping_up_payer_one_request_at_a_time(
    make_market: MarketFactory, spawn: Spawn, sandbox: SandboxServer, tmp_path: Path
) -> None:
    market = await make_market(
        credits=2,  # one order of the plan: 2 credits for 1 USDC (100 cents)
        per_request=1,
        subscriber_config=lambda _m: {"defaultSpendingLimitCents": 300},  # three orders
    )
    token = await market.token()  # never ordered: 0 credits, a delegation behind the token
    a, b = await spawn(market, sandbox.base_url, handler_delay=0.05, paid_budget=30.0)
    responses: list[httpx.Response] = []
    for _wave in range(20):  # bounded: concurrent waves across both replicas until spent
        wave = [r for r in await post_all([a.url, b.url], token, 4) if r is not None]
        assert len(wave) == 4
        responses.extend(wave)
        if all("cannot be ordered" in r.json().get("reason", "") for r in wave):
            break
    else:
        raise AssertionError("the delegation was never spent")
    stats = [await asyncio.to_thread(r.stop) for r in (a, b)]
    answered = [r for r in responses if r.status_code == 200]
    assert {r.status_code for r in responses} == {200, 402}
    assert len(answered) == 6  # 3 orders of 2 credits, 1 credit per answer
    assert all("payment-response" in r.headers for r in answered)  # no answer unpaid
    assert len(handler_runs(tmp_path)) == 6  # no work for a request that could not pay
    assert sum(s["settle_refused"] for s in stats) == 0
    burned = burns(sandbox, market.plan_id)
    assert len(burned) == 6 and len(set(burned)) == 6
    assert await market.balance() == 0  # conservation: 6 granted by top-ups = 0 + 6 burned


async def test_a_lost_answer_retried_on_the_other_replica_is_answered_the_same_paid_once(
    make_market: MarketFactory, spawn: Spawn, sandbox: SandboxServer, tmp_path: Path
) -> None:
    """Issue 46: the idempotency key lives in Redis, so the answer replica A sold (and lost
    on the way back) is what replica B replays: no second verify, settle or run."""
    market = await make_market()
    await market.order()
    client = ServiceClient(sandbox.base_url, api_key=market.subscriber_key)
    try:
        token = await client.get_access_token(
            market.plan_id, agent_id=market.agent_id, resource_url=market.endpoint.url
        )
    finally:
        await client.aclose()
    market.secrets.append(token)
    a, b = await spawn(market, sandbox.base_url)
    proxy = CutProxy(cuts=1)
    await proxy.start()
    where = urlsplit(a.url)
    proxy.upstream = f"{where.scheme}://{where.netloc}"
    headers = {"payment-signature": token, "Idempotency-Key": "svc_replica_retry_000001"}
    body = {"prompt": "one question, asked twice"}
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            with pytest.raises(httpx.TransportError):
                await http.post(proxy.origin + where.path, json=body, headers=headers)
            retry = await http.post(b.url, json=body, headers=headers)
    finally:
        await proxy.close()
    assert retry.status_code == 200 and retry.headers["Idempotent-Replayed"] == "true"
    assert decode_b64_json(retry.headers["payment-response"]) == proxy.lost[0]
    assert len(handler_runs(tmp_path)) == 1
    assert len(burns(sandbox, market.plan_id)) == 1
    async with httpx.AsyncClient(base_url=sandbox.base_url) as http:
        path = f"/sandbox/ledger/{market.plan_id}/{market.subscriber_address}"
        books = (await http.get(path)).json()
    assert int(books["burned"]) == 2  # one request of 2 credits
    assert int(books["granted"]) == int(books["balance"]) + int(books["burned"])
