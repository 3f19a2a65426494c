"""Deadlines (issue 10): the paid path has a total budget, the handler its own timeout, and the
endpoint's own server bounds how long a connection may take to send its headers.

No test asserts a duration: each waits with a bound, and the client's own timeout is far above
the budget under test, so a missing deadline shows as a client timeout (a failure)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.support import LogCollector
from tests.support.fixtures import StubMarketFactory
from tests.support.stub_service import StubService, make_token

PAYER = "0x" + "aa" * 20


async def post(http: httpx.AsyncClient, url: str, token: str, prompt: str = "hi") -> httpx.Response:
    return await http.post(url, json={"prompt": prompt}, headers={"payment-signature": token})


async def test_a_hung_service_gets_503_within_the_paid_budget(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(
        stub=StubService(balance=10), config={"paidBudgetSecs": 0.5, "requestTimeoutSecs": 60}
    )
    market.stub.hang.set()  # every service call waits forever
    async with httpx.AsyncClient(timeout=20) as http:
        response = await post(http, market.url, make_token(PAYER))
    assert response.status_code == 503
    assert response.headers["Retry-After"].isdigit()
    assert "nothing was charged" in response.json()["message"]
    assert market.stub.burned == 0 and market.stub.calls["settle"] == 0
    assert market.endpoint.stats.unavailable == 1
    assert (
        "could not verify a payment in time: the payment service is unavailable (timeout)"
        in all_logs.text
    )


async def test_a_settle_that_hangs_delivers_and_queues_within_the_budget(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(
        stub=StubService(balance=10), config={"paidBudgetSecs": 0.5, "requestTimeoutSecs": 60}
    )
    market.stub.hang_calls.add("settle")
    async with httpx.AsyncClient(timeout=20) as http:
        response = await post(http, market.url, make_token(PAYER), "the answer")
    assert response.status_code == 200 and "the answer" in response.text
    assert "payment-response" not in response.headers
    assert market.endpoint.stats.settle_deferred == 1
    assert market.endpoint.stats.settle_queue == 1


async def test_a_slow_handler_gets_504_and_is_not_charged(
    make_stub_market: StubMarketFactory,
) -> None:
    release = asyncio.Event()

    async def slow(request: dict[str, Any]) -> Any:
        await release.wait()
        return {"late": True}

    market = await make_stub_market(
        stub=StubService(balance=10), handler=slow, config={"handlerTimeoutSecs": 0.3}
    )
    async with httpx.AsyncClient(timeout=20) as http:
        response = await post(http, market.url, make_token(PAYER))
    release.set()
    assert response.status_code == 504
    assert "nothing was charged" in response.json()["message"]
    assert market.stub.calls["settle"] == 0 and market.stub.burned == 0
    assert market.endpoint.stats.handler_timeouts == 1
    assert market.endpoint.flow.book.known("plan-1", PAYER) == (10, 0)  # the claim is released


async def test_a_handler_raising_timeout_itself_is_a_500_not_a_504(
    make_stub_market: StubMarketFactory,
) -> None:
    async def broken(request: dict[str, Any]) -> Any:
        raise TimeoutError("the agent's own call timed out")

    market = await make_stub_market(stub=StubService(balance=10), handler=broken)
    async with httpx.AsyncClient(timeout=20) as http:
        response = await post(http, market.url, make_token(PAYER))
    assert response.status_code == 500
    assert market.endpoint.stats.handler_timeouts == 0
    assert market.endpoint.stats.handler_failures == 1
    assert market.stub.burned == 0


async def _read_until_closed(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before closing; a reset counts as closed (it is how a loaded
    kernel may end a connection the server dropped)."""
    data = b""
    try:
        while chunk := await reader.read(4096):
            data += chunk
    except ConnectionResetError:
        pass
    return data


async def test_connections_that_never_finish_their_headers_are_closed(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(config={"paidHeaderTimeoutSecs": 0.5})
    where = urlsplit(market.url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    streams = []
    for _ in range(300):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"POST {where.path} HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode())
        streams.append((reader, writer))
    trickler_reader, trickler = await asyncio.open_connection(host, port)
    trickler.write(b"POST / HTTP/1.1\r\n")

    async def trickle() -> None:
        for _ in range(100):  # one byte every 0.1 s: a bound per read would never fire
            await asyncio.sleep(0.1)
            if trickler.is_closing():
                return
            trickler.write(b"X")

    trickling = asyncio.create_task(trickle())
    try:
        closed = await asyncio.wait_for(
            asyncio.gather(
                *(_read_until_closed(r) for r, _ in streams), _read_until_closed(trickler_reader)
            ),
            timeout=15,
        )
    finally:
        trickling.cancel()
        for _, writer in streams:
            writer.close()
        trickler.close()
    assert all(data == b"" for data in closed)  # closed without an answer, not answered
    # and the endpoint still serves
    async with httpx.AsyncClient(timeout=20) as http:
        response = await http.post(market.url, json={"prompt": "hi"})
    assert response.status_code == 402


class BrokenThenHung(StubService):
    """Settle answers 500 ``failures`` times (an error the client does not retry itself, the flow
    does), then hangs until released."""

    def __init__(self, failures: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failures = failures

    async def _gate(self, name: str) -> Any:
        if name == "settle":
            self.calls[name] += 1
            if self.calls[name] <= self.failures:
                return await self.broken()
            await self.release.wait()
            return None
        return await super()._gate(name)

    async def broken(self) -> Any:
        from aiohttp import web

        return web.json_response({"code": "TEST.BROKEN", "message": "broken"}, status=500)


async def test_settle_retries_that_end_hung_stop_at_the_budget_and_queue_the_settle(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    # the flow's first two attempts fail at once (500), its last attempt hangs: the budget ends
    # it (not the client's timeout) and the delivered answer's settle is owed, queued
    market = await make_stub_market(
        stub=BrokenThenHung(2, balance=10),
        config={"paidBudgetSecs": 0.5, "requestTimeoutSecs": 60},
    )
    market.endpoint.flow.settler.backoff = (0.0, 0.0)
    async with httpx.AsyncClient(timeout=20) as http:
        response = await post(http, market.url, make_token(PAYER), "the answer")
    assert response.status_code == 200 and "the answer" in response.text
    assert "payment-response" not in response.headers
    assert market.stub.calls["settle"] == 3 and market.stub.burned == 0
    assert market.endpoint.stats.settle_deferred == 1
    assert market.endpoint.stats.settle_queue == 1
    assert "no answer within the paid budget" in all_logs.text
