"""Measure sandbox verify+settle pairs per second on a fresh database vs after 50,000 settles.

Not collected by pytest (a benchmark, not a test: speed never goes in assertions).
Run: ``python -m tests.sandbox.bench_flat_history [rounds]``. Fresh and seeded runs alternate;
medians of wall-clock and of process-CPU rates are printed (CPU time is steadier on a shared
machine). The benchmark suite's own version of this measurement is the reference.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time

import aiohttp

from svc_gateway.sandbox import start_sandbox
from svc_gateway.sandbox.seed import envelope, seed_settles

HISTORY = 50_000


async def pairs_per_second(history: int, seconds: float = 4.0) -> tuple[float, float]:
    """(wall-clock rate, CPU-time rate) of sequential verify+settle pairs over loopback."""
    db = os.path.join(tempfile.mkdtemp(prefix="svc-bench-"), "sandbox.sqlite")
    seeded = seed_settles(db, history)
    server = await start_sandbox(db=db)
    try:
        owner = {"Authorization": "Bearer " + seeded["owner"]["apiKey"]}
        buyer = {"Authorization": "Bearer " + seeded["buyer"]["apiKey"]}
        async with aiohttp.ClientSession(base_url=server.base_url + "/") as http:
            body = {
                "accepted": {"scheme": "svc:erc4337", "planId": seeded["planId"]},
                "delegationConfig": {"delegationId": seeded["delegationId"]},
            }
            async with http.post("x402/permissions", json=body, headers=buyer) as answer:
                token = (await answer.json())["accessToken"]
            call = {"paymentRequired": envelope(seeded["planId"]), "x402AccessToken": token}
            done = 0
            start, cpu = time.perf_counter(), time.process_time()
            while time.perf_counter() - start < seconds:
                async with http.post("x402/verify", json=call, headers=owner) as answer:
                    request_id = (await answer.json())["agentRequestId"]
                settle = {**call, "agentRequestId": request_id}
                async with http.post("x402/settle", json=settle, headers=owner) as answer:
                    if not (await answer.json())["success"]:
                        raise RuntimeError("settle failed")
                done += 1
            return done / (time.perf_counter() - start), done / (time.process_time() - cpu)
    finally:
        await server.close()


async def main(rounds: int) -> None:
    wall: dict[int, list[float]] = {0: [], HISTORY: []}
    cpu: dict[int, list[float]] = {0: [], HISTORY: []}
    for _ in range(rounds):
        for history in (0, HISTORY):
            w, c = await pairs_per_second(history)
            wall[history].append(w)
            cpu[history].append(c)
            print(f"history {history:>6}: {w:7.1f} pairs/s wall, {c:7.1f} pairs/CPU-s", flush=True)
    for name, data in (("wall", wall), ("cpu", cpu)):
        fresh, old = statistics.median(data[0]), statistics.median(data[HISTORY])
        print(
            f"{name} median: fresh {fresh:.1f}, after {HISTORY} {old:.1f}, ratio {old / fresh:.3f}"
        )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
