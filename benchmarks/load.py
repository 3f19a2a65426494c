"""Load generators: Debian's ``wrk`` when installed, else a closed-loop aiohttp generator.

Both send the same request (``POST`` JSON ``{"prompt"}`` with a ``payment-signature``) from
``concurrency`` connections for ``duration`` seconds and report requests/s over *successful*
(2xx) answers, latency percentiles, and how many answers were errors.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

PROMPT = {"prompt": "What does an x402 access token prove?"}


@dataclass(frozen=True)
class LoadResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    tool: str
    #: bytes the load generator read (answers' status lines, headers and bodies); 0 if unknown
    read_bytes: int = 0


def wrk_path() -> str | None:
    return shutil.which("wrk")


def _lua(token: str | None) -> str:
    body = json.dumps(PROMPT)
    lines = [
        'wrk.method = "POST"',
        f"wrk.body = {json.dumps(body)}",
        'wrk.headers["Content-Type"] = "application/json"',
    ]
    if token:
        lines.append(f'wrk.headers["payment-signature"] = {json.dumps(token)}')
    return "\n".join(lines) + "\n"


_SIZES = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if match is None:
        raise ValueError(f"unreadable wrk latency {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_wrk(output: str) -> LoadResult:
    """Read requests, errors and latency percentiles from ``wrk --latency`` output."""
    total = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    elapsed = re.search(r"requests in ([\d.]+\w+),", output)
    seconds = _ms(elapsed.group(1)) / 1e3 if elapsed else 0.0
    read = re.search(r"requests in [^,]+, ([\d.]+)(B|KB|MB|GB) read", output)
    read_bytes = round(float(read.group(1)) * _SIZES[read.group(2)]) if read else 0
    errors = 0
    if non2xx := re.search(r"Non-2xx or 3xx responses: (\d+)", output):
        errors += int(non2xx.group(1))
    if sock := re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    ):
        errors += sum(int(n) for n in sock.groups())
    pct = dict(re.findall(r"^\s+(50|99)(?:\.000)?%\s+(\S+)$", output, re.MULTILINE))
    ok = max(total - errors, 0)
    return LoadResult(
        rps=ok / seconds if seconds else 0.0,
        p50_ms=_ms(pct["50"]) if "50" in pct else float("nan"),
        p99_ms=_ms(pct["99"]) if "99" in pct else float("nan"),
        requests=total,
        errors=errors,
        tool="wrk",
        read_bytes=read_bytes,
    )


def run_wrk(url: str, token: str | None, concurrency: int, duration: float) -> LoadResult:
    wrk = wrk_path()
    assert wrk is not None
    with tempfile.TemporaryDirectory(prefix="svc-wrk-") as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(_lua(token))
        cmd = [
            wrk,
            "-t1",
            f"-c{concurrency}",
            f"-d{max(1, round(duration))}s",
            "--timeout",
            "10s",
            "--latency",
            "-s",
            str(script),
            url,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()[:300]}")
    return parse_wrk(done.stdout)


async def _aiohttp_load(
    url: str, token: str | None, concurrency: int, duration: float
) -> LoadResult:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["payment-signature"] = token
    body = json.dumps(PROMPT).encode()
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + duration
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers=headers) as response:
                        await response.read()
                        good = 200 <= response.status < 300
                except (aiohttp.ClientError, TimeoutError):
                    good = False
                if good:
                    latencies.append((time.perf_counter() - start) * 1e3)
                else:
                    errors += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    ordered = sorted(latencies)
    return LoadResult(
        rps=len(ordered) / elapsed if elapsed else 0.0,
        p50_ms=statistics.median(ordered) if ordered else float("nan"),
        p99_ms=ordered[int(len(ordered) * 0.99)] if ordered else float("nan"),
        requests=len(ordered) + errors,
        errors=errors,
        tool="aiohttp",
    )


def run_aiohttp(url: str, token: str | None, concurrency: int, duration: float) -> LoadResult:
    """The fallback generator (in this process; it competes with nothing else we run)."""
    return asyncio.run(_aiohttp_load(url, token, concurrency, duration))


def load(
    url: str, token: str | None, concurrency: int, duration: float, *, force_aiohttp: bool = False
) -> LoadResult:
    if wrk_path() and not force_aiohttp:
        return run_wrk(url, token, concurrency, duration)
    return run_aiohttp(url, token, concurrency, duration)
