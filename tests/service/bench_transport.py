"""Issue 9, in isolation: N POSTs at concurrency C against one local aiohttp server, the old
client's HTTP stack (httpx.AsyncClient, configured as the httpx-based ApiTransport was) vs the
new one (ServiceClient on aiohttp). Not a test; run: ``python -m tests.service.bench_transport``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import time
from collections.abc import Awaitable, Callable

from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import PaymentRequirement
from tests.helpers import fake_key


def serve(port: int) -> None:
    from aiohttp import web

    async def verify(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"isValid": True, "payer": "0x" + "1" * 40})

    app = web.Application()
    app.router.add_post("/api/v1/x402/verify", verify)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def drive(call: Callable[[], Awaitable[object]], total: int, concurrency: int) -> float:
    left = total

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await call()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total / (time.perf_counter() - start)


async def old_stack(base: str, total: int, concurrency: int) -> float:
    import httpx

    envelope = PaymentRequirement().wire()
    body = {"paymentRequired": envelope, "x402AccessToken": "t", "maxAmount": "1"}
    async with httpx.AsyncClient(
        base_url=base + "/",
        timeout=httpx.Timeout(30.0, connect=10.0),
        headers={"Accept": "application/json", "Service-Version": "1.1"},
        limits=httpx.Limits(max_connections=50, max_keepalive_connections=50),
        follow_redirects=False,
    ) as http:

        async def call() -> object:
            response = await http.request(
                "POST", "x402/verify", json=body, headers={"Authorization": "Bearer x"}
            )
            return response.json()

        await drive(call, 200, concurrency)  # warm the pool
        return await drive(call, total, concurrency)


async def new_stack(base: str, total: int, concurrency: int) -> float:
    client = ServiceClient(base, fake_key())
    envelope = PaymentRequirement()

    async def call() -> object:
        return await client.verify(envelope, "t", 1)

    await drive(call, 200, concurrency)
    rate = await drive(call, total, concurrency)
    await client.aclose()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("-c", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = multiprocessing.get_context("spawn").Process(target=serve, args=(port,), daemon=True)
    server.start()
    base = f"http://127.0.0.1:{port}/api/v1"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        for round_no in range(1, args.rounds + 1):
            old = asyncio.run(old_stack(base, args.n, args.c))
            new = asyncio.run(new_stack(base, args.n, args.c))
            print(
                f"round {round_no}: {args.n} POSTs at concurrency {args.c}: "
                f"httpx (old) {old:,.0f}/s, aiohttp ServiceClient (new) {new:,.0f}/s, "
                f"{new / old:.1f}x"
            )
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
