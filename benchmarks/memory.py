"""Memory under many paid requests: the paid endpoint's RSS growth, ``--only memory``.

Each request carries its own single-use token (a v3 token: its authorization has a ``nonce``)
from one of :data:`PAYERS` payers, so every bounded structure of the flow fills up to its bound
and must then stay there: the replay cache (single-use tokens), the admission book (per-payer
entries), the stats' recent receipts, the envelope cache. The stub facilitator answers each
verify with the token's payer. RSS (``/proc/<pid>/status`` ``VmRSS``) is read after the first
:data:`WARM_SHARE` of the requests and at the end; the figure is the growth between the two.
Tracing is off (the spans go nowhere, so nothing of them is kept).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from . import procs
from .load import PROMPT
from .report import Figure, Report, Target

#: distinct payers the requests come from (more than the admission book keeps: 10,000)
PAYERS = 12_000
#: the share of the requests sent before the first RSS reading (caches warming up)
WARM_SHARE = 0.1
CONCURRENCY = 32


@dataclass(frozen=True)
class MemoryResult:
    requests: int
    errors: int
    rss_start_mb: float
    rss_warm_mb: float
    rss_end_mb: float
    seconds: float

    @property
    def growth_mb(self) -> float:
        return self.rss_end_mb - self.rss_warm_mb


def rss_mb(pid: int) -> float:
    """Resident set size of process ``pid`` in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def payer(i: int) -> str:
    return "0x" + f"{i % PAYERS:040x}"


def single_use_token(i: int) -> str:
    """A v3-shaped token (base64 JSON) with its own nonce; the stub checks no signature."""
    authorization = {"from": payer(i), "nonce": f"0x{i:064x}", "value": "1"}
    raw = json.dumps({"payload": {"authorization": authorization}}, separators=(",", ":"))
    return base64.b64encode(raw.encode()).decode()


async def _send(url: str, first: int, count: int) -> int:
    """Send ``count`` paid requests (tokens ``first``..), ``CONCURRENCY`` at a time."""
    errors = 0
    body = json.dumps(PROMPT).encode()
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        counter = iter(range(first, first + count))

        async def worker() -> None:
            nonlocal errors
            for i in counter:
                headers = {
                    "Content-Type": "application/json",
                    "payment-signature": single_use_token(i),
                }
                try:
                    async with session.post(url, data=body, headers=headers) as response:
                        await response.read()
                        errors += response.status != 200
                except (aiohttp.ClientError, TimeoutError):
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return errors


def measure(requests: int) -> MemoryResult:
    """RSS of a paid endpoint (stub facilitator) before, after warming, after ``requests``."""
    with (
        procs.server("stub") as stub,
        procs.spawn(["-m", "benchmarks.serve", "paid", "--service", stub + "/api/v1"]) as line,
    ):
        url, pid = str(line["url"]), int(line["pid"])
        start = rss_mb(pid)
        began = time.perf_counter()
        warm = max(1, int(requests * WARM_SHARE))
        errors = asyncio.run(_send(url, 0, warm))
        warmed = rss_mb(pid)
        errors += asyncio.run(_send(url, warm, requests - warm))
        end = rss_mb(pid)
        seconds = time.perf_counter() - began
    return MemoryResult(requests, errors, start, warmed, end, seconds)


#: RSS growth allowed over the long run (100,000 requests; issue 30), after warming up
GROWTH_BOUND_MB = 20.0


def case_memory(report: Report, requests: int) -> None:
    """RSS growth of the paid endpoint over many single-use tokens from many payers."""
    result = measure(requests)
    print(
        f"  {result.requests:,} paid requests ({result.errors} errors) in {result.seconds:.0f} s: "
        f"RSS {result.rss_start_mb:.1f} MB at start, {result.rss_warm_mb:.1f} MB after "
        f"{WARM_SHARE:.0%}, {result.rss_end_mb:.1f} MB at the end",
        flush=True,
    )
    report.rows.append({"case": "memory, paid endpoint", **vars(result)})
    report.figure(
        Figure(
            f"RSS growth over {requests:,} paid requests (MB) [end / warm]",
            result.rss_end_mb,
            result.rss_warm_mb,
            absolute=result.growth_mb,
            unit="MB",
        ),
        Target("abs<=", GROWTH_BOUND_MB),
    )
