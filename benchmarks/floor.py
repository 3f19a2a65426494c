"""The chain case: the paid endpoint and the route middleware as a ratio of their floor.

Every side runs ``rounds`` times in rotating order (each round starts with the next side), and
each side's rate is the median of its rounds, so every side sees the same neighbours' noise.
Tracing is off on the headline sides; a paid endpoint with tracing on (the OpenTelemetry SDK
with a no-op exporter) is its own side, reported as its cost against tracing off.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from . import load, procs
from .chain import COUNTS_PATH
from .report import Figure, Report, Target

HEADLINE_C = 32
#: rounds of the chain case and their length (medians need an odd count; each round loads
#: every side once): many short rounds, so a neighbour's burst spoils few of them (21 since
#: the rounds' spread on this shared machine grew to ±30%: the median moves half as much)
CHAIN_ROUNDS = 21
CHAIN_SECS = 1.0


@dataclass(frozen=True)
class Side:
    label: str
    url: str
    token: str | None
    pid: int | None = None


@dataclass(frozen=True)
class Measured:
    """A side's median round: its load result and the server's CPU per request (µs); and
    every round's rate and CPU per request, in round order."""

    result: load.LoadResult
    cpu_us: float
    rates: tuple[float, ...] = ()
    cpus: tuple[float, ...] = ()


def per_round(value: Measured, baseline: Measured, *, cpu: bool = False) -> list[float]:
    """``value / baseline`` in each round (the two sides ran within seconds of each other,
    so a round's ratio sees one moment's neighbours), rounds where either side has none
    left out."""
    tops, bottoms = (value.cpus, baseline.cpus) if cpu else (value.rates, baseline.rates)
    return [a / b for a, b in zip(tops, bottoms, strict=False) if a and b]


def spread(values: list[float], unit: str = "×") -> str:
    """``median 0.880× (0.800–0.950×)``: the median and the range."""
    if not values:
        return "no rounds"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"median {mid:.3f}{unit} ({low:.3f}–{high:.3f}{unit})"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (every thread), from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def stub_counts(stub: str) -> dict[str, list[int]]:
    """The counting stub's tally per path: requests, their line+header bytes, their body
    bytes, its answers' body bytes (:func:`benchmarks.chain.counted_stub_app`)."""
    with urllib.request.urlopen(stub + COUNTS_PATH, timeout=10) as answer:
        counts: dict[str, list[int]] = json.loads(answer.read())
        return counts


def settled_counts(stub: str, quiet: float = 0.1, longest: float = 3.0) -> dict[str, list[int]]:
    """The stub's tally once it has stopped moving for ``quiet`` seconds: the requests the
    load generator left in flight at its end finish first, so each side's calls are its own."""
    counts = stub_counts(stub)
    deadline = time.monotonic() + longest
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = stub_counts(stub)
        if now == counts:
            break
        counts = now
    return counts


@dataclass
class Calls:
    """A side's facilitator traffic over all its rounds, per answered request."""

    answered: int = 0
    rounds: int = 0
    read_bytes: int = 0
    paths: dict[str, list[int]] = field(default_factory=dict)

    def add(self, before: dict[str, list[int]], after: dict[str, list[int]]) -> None:
        for path, totals in after.items():
            was = before.get(path, [0] * len(totals))
            mine = self.paths.setdefault(path, [0] * len(totals))
            for i, (new, old) in enumerate(zip(totals, was, strict=True)):
                mine[i] += new - old

    def summary(self) -> str:
        """``verify 1.000 (head 250 B, body 1,200 B, answer 120 B), ...`` per request."""
        n = max(self.answered, 1)
        total = sum(v[0] for v in self.paths.values())
        if not total:
            return "no facilitator calls"
        parts = []
        for path, (count, head, body, answer) in sorted(self.paths.items()):
            if not count:
                continue
            name = path.rsplit("/", 1)[-1] if "/x402/" in path else path
            parts.append(
                f"{name} {count / n:.3f} ({count:,} calls; head {head / count:,.0f} B, "
                f"body {body / count:,.0f} B, answer {answer / count:,.0f} B)"
            )
        # wrk stops counting at its deadline with c requests in flight: their calls are made
        # but they are not answered requests, so up to 2 × c calls a round are over 2 × answered
        tail = (total - 2 * self.answered) / max(self.rounds, 1)
        read = f"; answers read {self.read_bytes / n:,.0f} B" if self.read_bytes else ""
        return (
            f"{total / n:.3f} facilitator calls per answered request ({tail:+.0f} a round over "
            f"2 per answer: requests in flight at the load's end): {', '.join(parts)}{read}"
        )


def rotate(sides: list[Side], round_: int) -> list[Side]:
    """The order of one round: the sides shifted by the round number."""
    shift = round_ % len(sides)
    return sides[shift:] + sides[:shift]


def medians(
    sides: list[Side],
    c: int,
    rounds: int,
    duration: float,
    *,
    force_aiohttp: bool = False,
    stub: str | None = None,
) -> dict[str, Measured]:
    """Each side's median round over ``rounds`` rotating, interleaved rounds: the median rate,
    and the median of the server's CPU time per answered request (less sensitive to the other
    tenants of the machine than the rate, which waits on the shared cores). With ``stub`` (the
    counting stub's URL) each side's facilitator calls and bytes per answered request are
    printed too."""
    runs: dict[str, list[load.LoadResult]] = {side.label: [] for side in sides}
    cpus: dict[str, list[float]] = {side.label: [] for side in sides}
    calls = {side.label: Calls() for side in sides}
    for round_ in range(rounds):
        for side in rotate(sides, round_):
            before = cpu_seconds(side.pid) if side.pid else 0.0
            counted = settled_counts(stub) if stub else {}
            result = load.load(side.url, side.token, c, duration, force_aiohttp=force_aiohttp)
            if side.pid and result.requests:
                spent = cpu_seconds(side.pid) - before
                cpus[side.label].append(spent / result.requests * 1e6)
            if stub:
                tally = calls[side.label]
                tally.add(counted, settled_counts(stub))
                tally.answered += result.requests - result.errors
                tally.rounds += 1
                tally.read_bytes += result.read_bytes
            runs[side.label].append(result)
    out = {}
    for label, results in runs.items():
        ordered = sorted(results, key=lambda r: r.rps)
        cpu = statistics.median(cpus[label]) if cpus[label] else math.nan
        rates = tuple(r.rps for r in results)
        out[label] = Measured(ordered[len(ordered) // 2], cpu, rates, tuple(cpus[label]))
        print(
            f"  {label:<42} median {out[label].result.rps:>8.1f} req/s "
            f"({min(rates):,.0f}–{max(rates):,.0f}), CPU {cpu:7.1f} µs/req"
        )
        if stub and calls[label].answered:
            print(f"    {calls[label].summary()}")
    return out


def case_chain(
    report: Report,
    duration: float,
    rounds: int,
    *,
    force_aiohttp: bool = False,
    pin: bool = True,
) -> None:
    """The chain (two facilitator calls, nothing else) vs our paid endpoint and middleware.

    With ``pin`` (and 2+ CPUs) every server under test runs on one CPU and the load generator,
    the stub and this process on the others (:func:`benchmarks.procs.cpu_split`), the same for
    every side; each headline ratio is also given round by round (median and range)."""
    token = "bench-token"
    split = procs.cpu_split(pin)
    server_cpus, load_cpus = split if split else (None, None)
    with ExitStack() as stack:
        stack.enter_context(procs.pinned(load_cpus))
        stub = str(stack.enter_context(procs.spawn(["-m", "benchmarks.chain", "--stub"]))["url"])
        service = ("--service", stub + "/api/v1")

        def up(label: str, args: list[str], tok: str | None = token) -> Side:
            line = stack.enter_context(procs.spawn(args, cpus=server_cpus))
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
            load.load(side.url, side.token, 4, min(1.0, duration), force_aiohttp=force_aiohttp)
        got = medians(sides, HEADLINE_C, rounds, duration, force_aiohttp=force_aiohttp, stub=stub)
    where = f"server on CPU {sorted(split[0])}, load on {sorted(split[1])}" if split else "no"
    print(f"  pinned: {where}; {rounds} rounds of {duration:g} s")
    for side in sides:
        report.load_row(side.label, HEADLINE_C, got[side.label].result)
        report.rows.append({"case": side.label, "cpu_us_per_request": got[side.label].cpu_us})
    measured = [got[side.label] for side in sides]
    bare, chain, paid, route, traced = (m.result.rps for m in measured)
    cpu = [m.cpu_us for m in measured]
    for label, m in (("paid endpoint", measured[2]), ("middleware route", measured[3])):
        rate, spent = per_round(m, measured[1]), per_round(m, measured[1], cpu=True)
        print(f"  {label} / the chain, round by round: rate {spread(rate)}, CPU {spread(spent)}")
        report.rows.append(
            {
                "case": f"{label} / the chain, per round",
                "rate_ratios": [round(r, 4) for r in rate],
                "cpu_ratios": [round(r, 4) for r in spent],
            }
        )
    note = f"c={HEADLINE_C}, median of {rounds}" + (", pinned" if split else "")
    report.figure(Figure("paid endpoint / the chain", paid, chain, note), Target(">=", 0.75))
    report.figure(Figure("middleware route / the chain", route, chain, note), Target(">=", 0.85))
    report.figure(Figure("the chain / bare handler", chain, bare, note))
    # CPU per request of the server process: the cost the rate is bounded by on a busy machine
    report.figure(Figure("CPU per request: paid endpoint / the chain", cpu[2], cpu[1], "µs"))
    report.figure(Figure("CPU per request: middleware route / the chain", cpu[3], cpu[1], "µs"))
    # cost is time per request: tracing-off rate / tracing-on rate
    report.figure(Figure("tracing on / off (time per request)", paid, traced, note))
    report.figure(Figure("tracing on / off (CPU per request)", cpu[4], cpu[2], "µs"))
