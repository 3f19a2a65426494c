"""Benchmark: what the 60 s balance cache saves a prompt, and what the runtime bridge costs.

Run: ``python -m tests.bench_context``. Prints timings and ratios against baselines measured in
the same run (the machines are shared, so absolute numbers mean little). Not collected by pytest.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import svc_gateway
from svc_gateway.client import ServiceClient
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.login import CredentialStore
from svc_gateway.models import PlanMetadata
from svc_gateway.pricing import crypto_price, fixed_credits
from svc_gateway.sandbox import start_sandbox

ROUNDS = 300


async def _timed(label: str, n: int, make: Callable[[], Awaitable[object]]) -> float:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await make()
        samples.append(time.perf_counter() - start)
    median = statistics.median(samples)
    p95 = sorted(samples)[int(n * 0.95)]
    print(f"{label:<44} median {median * 1e6:9.1f} µs  p95 {p95 * 1e6:9.1f} µs")
    return median


async def main() -> None:
    server = await start_sandbox()
    builder = await server.create_account("builder")
    subscriber = await server.create_account("subscriber")
    owner = ServiceClient(server.base_url, builder["apiKey"])
    plan_id = await owner.register_plan(
        PlanMetadata(name="Bench"), crypto_price([1], [builder["address"]]), fixed_credits(10)
    )
    await owner.aclose()
    gateway = ReferenceGateway(
        {"environment": "local", "baseUrl": server.base_url, "planId": plan_id}
    )
    store = CredentialStore(Path(tempfile.mkdtemp()), use_keyring=False)
    handle = svc_gateway.register(gateway, store=store)
    await gateway.run_command("svc_login", subscriber["apiKey"])
    direct = ServiceClient(server.base_url, subscriber["apiKey"])

    async def uncached() -> None:
        handle.context.cache.invalidate(plan_id)
        await gateway.context_text()

    base = await _timed(
        "direct client balance GET (baseline)", ROUNDS, lambda: direct.get_plan_balance(plan_id)
    )
    miss = await _timed("context hook, cache miss (fetch each time)", ROUNDS, uncached)
    hit = await _timed("context hook, cache hit (within 60 s)", ROUNDS, gateway.context_text)
    tool = await _timed(
        "svc_checkBalance tool via runtime bridge",
        ROUNDS,
        lambda: gateway.call_tool("svc_checkBalance", {}),
    )
    print(f"cache hit is {miss / hit:.1f}x faster than a miss")
    print(f"miss costs {miss / base:.2f}x a direct GET (bridge + formatting overhead)")
    print(f"tool call costs {tool / base:.2f}x a direct GET")
    await direct.aclose()
    await asyncio.to_thread(handle.close)
    await server.close()


if __name__ == "__main__":
    asyncio.run(main())
