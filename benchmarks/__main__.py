"""``python -m benchmarks``: the benchmark suite, every figure a ratio to a same-run baseline.

Runs each server in its own process on 127.0.0.1, drives it with ``wrk`` (or an aiohttp
generator when ``wrk`` is missing), prints a table with the targets (pass/miss), and writes
``results.json`` and ``benchmarks.png`` to ``--out``. What each case measures, and against
what: ``docs/benchmarks.md``. ``--quick`` is a smoke run of every case with tiny durations
(its figures are noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from . import (
    floor,
    instructions,
    load,
    market,
    mcp_case,
    memory,
    micro,
    procs,
    queue_case,
    redis_case,
)
from .report import Figure, Report, Target

CONCURRENCIES = (1, 8, 32, 128)
HEADLINE_C = 32


@dataclasses.dataclass(frozen=True)
class Settings:
    duration: float
    load_rounds: int
    rounds: int
    import_runs: int
    seed: int
    settle_secs: float
    force_aiohttp: bool
    cases: frozenset[str]
    memory_requests: int = 20_000
    chain_rounds: int = floor.CHAIN_ROUNDS
    chain_secs: float = floor.CHAIN_SECS
    pin: bool = True
    ir_rounds: int = 3
    ir_secs: float = 10.0


@dataclasses.dataclass(frozen=True)
class Side:
    label: str
    url: str
    token: str | None


def _show(label: str, c: int, result: load.LoadResult) -> None:
    print(
        f"  {label:<34} c={c:<4} {result.rps:>9.1f} req/s  p50 {result.p50_ms:>8.2f} ms  "
        f"errors {result.errors}",
        flush=True,
    )


def _compare(report: Report, sides: list[Side], c: int, s: Settings) -> list[float]:
    """Each side ``load_rounds`` times, interleaved (the order flips every round); the best
    round of each side is kept, which discounts bursts from other tenants of the machine."""
    best: dict[str, load.LoadResult] = {}
    for round_ in range(s.load_rounds):
        for side in sides if round_ % 2 == 0 else sides[::-1]:
            result = load.load(side.url, side.token, c, s.duration, force_aiohttp=s.force_aiohttp)
            if side.label not in best or result.rps > best[side.label].rps:
                best[side.label] = result
    for side in sides:
        report.load_row(side.label, c, best[side.label])
        _show(side.label, c, best[side.label])
    return [best[side.label].rps for side in sides]


def _warm(url: str, token: str | None, s: Settings) -> None:
    load.load(url, token, 4, min(1.0, s.duration), force_aiohttp=s.force_aiohttp)


def case_stub(report: Report, s: Settings) -> None:
    """Bare handler vs our paid endpoint vs the SDK middleware, one stub facilitator."""
    token = "bench-token"
    with (
        procs.server("stub") as stub,
        procs.server("bare") as bare_url,
        procs.server("paid", "--service", stub + "/api/v1") as paid_url,
        procs.server("sdk", env={"NVM_BACKEND_URL": stub}) as sdk_url,
    ):
        for url in (bare_url, paid_url, sdk_url):
            _warm(url, token, s)
        bare = Side("bare aiohttp handler", bare_url, None)
        paid = Side("paid endpoint (stub)", paid_url, token)
        sdk = Side("payments-py middleware (stub)", sdk_url, token)
        ours: dict[int, float] = {}
        theirs: dict[int, float] = {}
        rps_bare, ours_bare = _compare(report, [bare, paid], HEADLINE_C, s)
        for c in CONCURRENCIES:
            ours[c], theirs[c] = _compare(report, [paid, sdk], c, s)
    report.figure(
        Figure("paid endpoint (stub) / bare handler", ours_bare, rps_bare, "c=32"),
        Target(">=", 0.15),
    )
    for c in CONCURRENCIES:
        report.figure(
            Figure(f"paid endpoint / SDK middleware, c={c}", ours[c], theirs[c], "stub"),
            Target(">=", 3.0) if c == HEADLINE_C else None,
        )


def case_middleware(report: Report, s: Settings) -> None:
    """Our payment middleware on a route vs the ungated route, payments-py and x402 (stub)."""
    token = "bench-token"
    with (
        procs.server("stub") as stub,
        procs.server("bare") as bare_url,
        procs.server("route", "--service", stub + "/api/v1") as route_url,
        procs.server("sdk", env={"NVM_BACKEND_URL": stub}) as sdk_url,
        procs.ready("x402", "--facilitator", stub + "/facilitator") as x402,
    ):
        x402_url, x402_token = str(x402["url"]), str(x402["token"])
        for url, tok in ((bare_url, None), (route_url, token), (sdk_url, token)):
            _warm(url, tok, s)
        _warm(x402_url, x402_token, s)
        bare = Side("ungated route (bare aiohttp)", bare_url, None)
        route = Side("payment middleware route (stub)", route_url, token)
        sdk = Side("payments-py middleware (stub)", sdk_url, token)
        x402_side = Side("x402 FastAPI middleware (stub)", x402_url, x402_token)
        rps_bare, rps_route = _compare(report, [bare, route], HEADLINE_C, s)
        ours_sdk, rps_sdk = _compare(report, [route, sdk], HEADLINE_C, s)
        ours_x402, rps_x402 = _compare(report, [route, x402_side], HEADLINE_C, s)
    report.figure(
        Figure("middleware route / ungated route", rps_route, rps_bare, "c=32"),
        Target(">=", 0.15),
    )
    report.figure(
        Figure("middleware route / payments-py middleware", ours_sdk, rps_sdk, "c=32"),
        Target(">=", 3.0),
    )
    report.figure(
        Figure("middleware route / x402 middleware", ours_x402, rps_x402, "c=32"),
        Target(">=", 2.0),
    )


def case_sandbox(report: Report, s: Settings) -> None:
    """Our paid endpoint against the local sandbox vs the bare handler."""
    with market.sandbox() as ready, procs.server("bare") as bare_url:
        m = asyncio.run(market.build_market(ready))
        args = ("--service", m.base_url, "--key", m.builder_key, "--plan", m.plan_id)
        with procs.server("paid", *args) as paid_url:
            _warm(bare_url, None, s)
            _warm(paid_url, m.token, s)
            bare = Side("bare handler (sandbox case)", bare_url, None)
            paid = Side("paid endpoint (sandbox)", paid_url, m.token)
            rps_bare, rps_paid = _compare(report, [bare, paid], HEADLINE_C, s)
    report.figure(Figure("paid endpoint (sandbox) / bare handler", rps_paid, rps_bare, "c=32"))


def case_ledger(report: Report, s: Settings) -> None:
    """The sandbox's verify+settle rate on a fresh database vs one with ``seed`` settles."""
    histories = (0, s.seed)
    best: dict[int, tuple[float, int]] = {h: (0.0, 0) for h in histories}
    with tempfile.TemporaryDirectory(prefix="svc-bench-db-") as tmp, ExitStack() as stack:
        markets = {}
        for history in histories:  # both sandboxes up at once, measured in turn
            db = str(Path(tmp) / f"sandbox-{history}.db")
            seeded = market.seed(db, history)
            ready = stack.enter_context(market.sandbox(db))
            markets[history] = asyncio.run(market.seeded_market(ready, seeded))
            market.settle_rate(markets[history], 8, min(1.0, s.settle_secs))  # warm up
        for round_ in range(2 * s.load_rounds):
            for history in histories if round_ % 2 == 0 else histories[::-1]:
                rate, errors = market.settle_rate(markets[history], 8, s.settle_secs)
                if rate > best[history][0]:
                    best[history] = (rate, errors)
    (fresh, err1), (aged, err2) = best[0], best[s.seed]
    print(
        f"  sandbox verify+settle: fresh {fresh:.1f}/s, after {s.seed:,} settles {aged:.1f}/s "
        f"(failed pairs {err1 + err2})",
        flush=True,
    )
    for history, (rate, errors) in best.items():
        report.rows.append(
            {
                "case": f"sandbox verify+settle, {history} settles of history",
                "concurrency": 8,
                "rps": rate,
                "errors": errors,
            }
        )
    report.figure(
        Figure(f"sandbox rate after {s.seed:,} settles / fresh", aged, fresh, "c=8"),
        Target("within", 0.10),
    )


def case_micro(report: Report, s: Settings) -> None:
    """Tool call vs bare client call, context hook hit and miss, import + register."""
    calls = micro.measure_calls(s.rounds)
    for name, timing in calls.items():
        print(f"  {name:<34} median {timing.median_us:9.1f} µs  p95 {timing.p95_us:9.1f} µs")
        report.rows.append({"case": name, "median_us": timing.median_us, "p95_us": timing.p95_us})
    bare = calls["bare client balance GET"].median_us
    hit = calls["context hook hit"].median_us
    report.figure(
        Figure("tool call / bare client call", calls["tool call svc_checkBalance"].median_us, bare),
        Target("<=", 1.6),
    )
    inner = calls["plugin loop: the tool (execute)"].median_us
    there = calls["plugin loop: its client's GET"].median_us
    report.figure(Figure("tool on the plugin loop / its client's GET there", inner, there))
    hop = calls["hop: host loop to plugin loop and back"].median_us
    report.figure(
        Figure(
            "hop to the plugin loop and back (µs) [/ bare call]", hop, bare, absolute=hop, unit="µs"
        )
    )
    report.figure(
        Figure("context hook miss / bare client call", calls["context hook miss"].median_us, bare)
    )
    report.figure(
        Figure("context hook hit (µs) [hit / bare call]", hit, bare, absolute=hit, unit="µs"),
        Target("abs<=", 20.0),
    )
    imp = micro.measure_import(s.import_runs)
    base_ms = float(imp["baseline_ms"])  # type: ignore[arg-type]
    cold_ms = float(imp["register_ms_cold"])  # type: ignore[arg-type]
    warm_ms = float(imp["register_ms_pydantic"])  # type: ignore[arg-type]
    loaded = ", ".join(imp["modules_cold"]) or "none"  # type: ignore[arg-type]
    print(
        f"  import aiohttp {base_ms:.0f} ms; import + register {cold_ms:.0f} ms (pydantic not "
        f"loaded before), {warm_ms:.0f} ms (the host had loaded pydantic); "
        f"bytecode cached; register loaded {loaded}"
    )
    top = imp["top_imports"]
    print("  largest own import times after aiohttp (-X importtime, one run, pydantic cold):")
    for name, ms in top:  # type: ignore[attr-defined]
        print(f"    {ms:7.1f} ms  {name}")
    report.rows.append({"case": "import + register", **imp})
    for label, ms in (("", cold_ms), (", pydantic preloaded", warm_ms)):
        name = f"import + register{label} (ms) [/ import aiohttp]"
        report.figure(Figure(name, ms, base_ms, absolute=ms, unit="ms"), Target("abs<=", 150.0))


def case_redis(report: Report, s: Settings) -> None:
    """The shared state (stateUrl, a local Redis) vs the in-process book; two replicas vs one."""
    redis_case.case_redis(
        report,
        rounds=s.chain_rounds,
        duration=s.chain_secs,
        replica_secs=s.duration,
        replica_rounds=s.load_rounds,
        pin=s.pin,
        force_aiohttp=s.force_aiohttp,
    )


def case_queue(report: Report, s: Settings) -> None:
    """The settle journal's add/remove at 10k entries vs at 10, loop stalls, a drain."""
    queue_case.case(report, s.rounds, s.load_rounds)


def case_chain(report: Report, s: Settings) -> None:
    """The chain (verify + settle, nothing else) vs our paid endpoint and middleware."""
    floor.case_chain(report, s.chain_secs, s.chain_rounds, force_aiohttp=s.force_aiohttp, pin=s.pin)


def case_memory(report: Report, s: Settings) -> None:
    """RSS growth of the paid endpoint over many single-use tokens from many payers."""
    memory.case_memory(report, s.memory_requests)


def case_mcp(report: Report, s: Settings) -> None:
    """A paid MCP tools/call vs an unpaid one on the same server (stub facilitator)."""
    mcp_case.case_mcp(report, s.rounds)


def case_instructions(report: Report, s: Settings) -> None:
    """Instructions per answered request under callgrind, against the chain's."""
    instructions.case(report, s.ir_rounds, s.ir_secs)


CASES = {
    "chain": case_chain,
    "stub": case_stub,
    "middleware": case_middleware,
    "sandbox": case_sandbox,
    "ledger": case_ledger,
    "micro": case_micro,
    "queue": case_queue,
    "redis": case_redis,
    "memory": case_memory,
    "mcp": case_mcp,
    "instructions": case_instructions,
}


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny durations")
    parser.add_argument(
        "--only",
        default=",".join(CASES),
        help=f"comma-separated cases to run (default all: {','.join(CASES)})",
    )
    parser.add_argument(
        "--duration", type=float, help="seconds per load run (default 2, 1 with --quick)"
    )
    parser.add_argument(
        "--chain-rounds",
        type=int,
        help=f"rotating rounds of the chain case (default {floor.CHAIN_ROUNDS}, 1 with --quick)",
    )
    parser.add_argument(
        "--chain-duration",
        type=float,
        help=f"seconds per load run of the chain case (default {floor.CHAIN_SECS:g})",
    )
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="chain and redis cases: do not pin the servers under test to one CPU and the load "
        "to the rest",
    )
    parser.add_argument("--seed", type=int, default=50_000, help="settles of history (ledger)")
    parser.add_argument(
        "--aiohttp-load", action="store_true", help="use the aiohttp generator even if wrk exists"
    )
    parser.add_argument("--out", default="benchmarks/results", help="where the JSON and PNG go")
    parser.add_argument(
        "--memory-requests",
        type=int,
        help="paid requests of the memory case (default 20,000; 2,000 with --quick; the "
        "issue's long run is 100,000)",
    )
    parser.add_argument(
        "--ir-rounds", type=int, help="instructions case: rounds (default 3, 1 with --quick)"
    )
    parser.add_argument(
        "--ir-duration",
        type=float,
        help="instructions case: seconds of load counted per round (default 10, 3 with --quick)",
    )
    args = parser.parse_args(argv)
    cases = frozenset(c.strip() for c in args.only.split(",") if c.strip())
    unknown = cases - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; choose from {sorted(CASES)}")
    quick = args.quick
    settings = Settings(
        duration=args.duration or (1.0 if quick else 2.0),
        load_rounds=1 if quick else 3,
        rounds=30 if quick else 300,
        import_runs=1 if quick else 5,
        seed=min(args.seed, 2_000) if quick else args.seed,
        settle_secs=1.0 if quick else 1.5,
        force_aiohttp=args.aiohttp_load,
        cases=cases,
        memory_requests=args.memory_requests or (2_000 if quick else 20_000),
        chain_rounds=args.chain_rounds or (1 if quick else floor.CHAIN_ROUNDS),
        chain_secs=args.chain_duration or floor.CHAIN_SECS,
        pin=not args.no_pin,
        ir_rounds=args.ir_rounds or (1 if quick else 3),
        ir_secs=args.ir_duration or (3.0 if quick else 10.0),
    )
    return args, settings


def _loadavg() -> str:
    """The machine's 1-minute load average: how busy the other tenants kept it."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:  # pragma: no cover - platforms without it
        return "?"


def main(argv: list[str] | None = None) -> int:
    args, settings = parse(argv)
    generator = "aiohttp" if settings.force_aiohttp or not load.wrk_path() else "wrk -t1"
    report = Report(
        meta={
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "cores": os.cpu_count(),
            "python": sys.version.split()[0],
            "load generator": generator,
            "duration_s": settings.duration,
            "rounds": settings.load_rounds,
            "quick": args.quick,
            "load average": _loadavg(),
        }
    )
    print(
        f"svc benchmarks: {report.meta['cores']} cores, load by {generator}, "
        f"{settings.duration:g} s per load run{' (quick)' if args.quick else ''}",
        flush=True,
    )
    failed: list[str] = []
    for name, case in CASES.items():
        if name in settings.cases:
            print(f"[{name}] {(case.__doc__ or '').strip().splitlines()[0]}", flush=True)
            try:
                case(report, settings)
            except Exception as exc:  # one broken case must not lose the others' figures
                failed.append(name)
                print(f"  case {name!r} FAILED: {type(exc).__name__}: {exc}", flush=True)
    report.meta["load average"] += f" → {_loadavg()}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print()
    print(report.table())
    (out / "results.json").write_text(json.dumps(report.as_json(), indent=2) + "\n")
    chart = report.chart(out / "benchmarks.png")
    print(f"\nwrote {out / 'results.json'}" + (f" and {chart}" if chart else ""))
    if failed:
        print(f"cases that failed (no figures): {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
