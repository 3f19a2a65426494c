"""The chain case: the paid endpoint and the route middleware as a ratio of their floor.

Every side runs ``rounds`` times in rotating order (each round starts with the next side), and
each side's rate is the median of its rounds, so every side sees the same neighbours' noise.
Tracing is off on the headline sides; a paid endpoint with tracing on (the OpenTelemetry SDK
with a no-op exporter) is its own side, reported as its cost against tracing off.
"""

from __future__ import annotations

import math
import os
import statistics
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from . import load, procs
from .report import Figure, Report, Target

HEADLINE_C = 32
#: rounds of the chain case (medians need an odd count; each round loads every side once)
CHAIN_ROUNDS = 5


@dataclass(frozen=True)
class Side:
    label: str
    url: str
    token: str | None
    pid: int | None = None


@dataclass(frozen=True)
class Measured:
    """A side's median round: its load result and the server's CPU per request (µs)."""

    result: load.LoadResult
    cpu_us: float


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (every thread), from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def rotate(sides: list[Side], round_: int) -> list[Side]:
    """The order of one round: the sides shifted by the round number."""
    shift = round_ % len(sides)
    return sides[shift:] + sides[:shift]


def medians(
    sides: list[Side], c: int, rounds: int, duration: float, *, force_aiohttp: bool = False
) -> dict[str, Measured]:
    """Each side's median round over ``rounds`` rotating, interleaved rounds: the median rate,
    and the median of the server's CPU time per answered request (less sensitive to the other
    tenants of the machine than the rate, which waits on the shared cores)."""
    runs: dict[str, list[load.LoadResult]] = {side.label: [] for side in sides}
    cpus: dict[str, list[float]] = {side.label: [] for side in sides}
    for round_ in range(rounds):
        for side in rotate(sides, round_):
            before = cpu_seconds(side.pid) if side.pid else 0.0
            result = load.load(side.url, side.token, c, duration, force_aiohttp=force_aiohttp)
            if side.pid and result.requests:
                spent = cpu_seconds(side.pid) - before
                cpus[side.label].append(spent / result.requests * 1e6)
            runs[side.label].append(result)
    out = {}
    for label, results in runs.items():
        ordered = sorted(results, key=lambda r: r.rps)
        cpu = statistics.median(cpus[label]) if cpus[label] else math.nan
        out[label] = Measured(ordered[len(ordered) // 2], cpu)
        spread = ", ".join(f"{r.rps:,.0f}" for r in results)
        print(
            f"  {label:<42} median {out[label].result.rps:>8.1f} req/s, CPU {cpu:7.1f} µs/req"
            f"  (rounds: {spread})"
        )
    return out


def case_chain(
    report: Report, duration: float, load_rounds: int, *, force_aiohttp: bool = False
) -> None:
    """The chain (two facilitator calls, nothing else) vs our paid endpoint and middleware."""
    token = "bench-token"
    rounds = CHAIN_ROUNDS if load_rounds > 1 else 1
    with ExitStack() as stack:
        stub = stack.enter_context(procs.server("stub"))
        service = ("--service", stub + "/api/v1")

        def up(label: str, args: list[str], tok: str | None = token) -> Side:
            line = stack.enter_context(procs.spawn(args))
            return Side(label, str(line["url"]), tok, int(line["pid"]))

        serve = ["-m", "benchmarks.serve"]
        sides = [
            up("bare aiohttp handler (no calls)", [*serve, "bare"], None),
            up("the chain (verify + settle, nothing else)", ["-m", "benchmarks.chain", *service]),
            up("paid endpoint (stub, tracing off)", [*serve, "paid", *service]),
            up("payment middleware route (stub)", [*serve, "route", *service]),
            up("paid endpoint (stub, tracing on)", [*serve, "paid", *service, "--tracing"]),
        ]
        for side in sides:  # warm every pool and cache
            load.load(side.url, side.token, 4, 1, force_aiohttp=force_aiohttp)
        got = medians(sides, HEADLINE_C, rounds, duration, force_aiohttp=force_aiohttp)
    for side in sides:
        report.load_row(side.label, HEADLINE_C, got[side.label].result)
        report.rows.append({"case": side.label, "cpu_us_per_request": got[side.label].cpu_us})
    bare, chain, paid, route, traced = (got[side.label].result.rps for side in sides)
    cpu = [got[side.label].cpu_us for side in sides]
    note = f"c={HEADLINE_C}, median of {rounds}"
    report.figure(Figure("paid endpoint / the chain", paid, chain, note), Target(">=", 0.85))
    report.figure(Figure("middleware route / the chain", route, chain, note), Target(">=", 0.85))
    report.figure(Figure("the chain / bare handler", chain, bare, note))
    # CPU per request of the server process: the cost the rate is bounded by on a busy machine
    report.figure(Figure("CPU per request: paid endpoint / the chain", cpu[2], cpu[1], "µs"))
    report.figure(Figure("CPU per request: middleware route / the chain", cpu[3], cpu[1], "µs"))
    # cost is time per request: tracing-off rate / tracing-on rate
    report.figure(Figure("tracing on / off (time per request)", paid, traced, note))
    report.figure(Figure("tracing on / off (CPU per request)", cpu[4], cpu[2], "µs"))
