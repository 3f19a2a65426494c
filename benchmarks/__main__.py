"""``python -m benchmarks``: the issue-9 benchmark suite, every figure a same-run ratio.

Runs each server in its own process on 127.0.0.1, drives it with ``wrk`` (or an aiohttp
generator when ``wrk`` is missing), prints a table with the targets (pass/miss), and writes
``results.json`` and ``benchmarks.png`` to ``--out``. A full run takes about 2–3 minutes on
2 cores; ``--quick`` is a smoke run of every case with tiny durations (its figures are noisy).
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
from pathlib import Path

from . import load, market, micro, procs
from .report import Figure, Report, Target

CONCURRENCIES = (1, 8, 32, 128)
HEADLINE_C = 32


@dataclasses.dataclass(frozen=True)
class Settings:
    duration: float
    rounds: int
    import_runs: int
    seed: int
    settle_secs: float
    force_aiohttp: bool
    cases: frozenset[str]


def _run(report: Report, label: str, url: str, token: str | None, c: int, s: Settings) -> float:
    result = load.load(url, token, c, s.duration, force_aiohttp=s.force_aiohttp)
    report.load_row(label, c, result)
    print(
        f"  {label:<34} c={c:<4} {result.rps:>9.1f} req/s  p50 {result.p50_ms:>8.2f} ms  "
        f"errors {result.errors}",
        flush=True,
    )
    return result.rps


def _warm(url: str, token: str | None, s: Settings) -> None:
    load.load(url, token, 4, 1, force_aiohttp=s.force_aiohttp)


def case_stub(report: Report, s: Settings) -> None:
    """Bare handler vs our paid endpoint vs the SDK middleware, one stub facilitator."""
    token = "bench-token"
    with (
        procs.server("stub") as stub,
        procs.server("bare") as bare,
        procs.server("paid", "--service", stub + "/api/v1") as paid,
        procs.server("sdk", env={"NVM_BACKEND_URL": stub}) as sdk,
    ):
        for url in (bare, paid, sdk):
            _warm(url, token, s)
        rps_bare = _run(report, "bare aiohttp handler", bare, None, HEADLINE_C, s)
        ours: dict[int, float] = {}
        theirs: dict[int, float] = {}
        for c in CONCURRENCIES:
            ours[c] = _run(report, "paid endpoint (stub)", paid, token, c, s)
            theirs[c] = _run(report, "payments-py middleware (stub)", sdk, token, c, s)
    report.figure(
        Figure("paid endpoint (stub) / bare handler", ours[HEADLINE_C], rps_bare, "c=32"),
        Target(">=", 0.15),
    )
    for c in CONCURRENCIES:
        report.figure(
            Figure(f"paid endpoint / SDK middleware, c={c}", ours[c], theirs[c], "stub"),
            Target(">=", 3.0) if c == HEADLINE_C else None,
        )


def case_sandbox(report: Report, s: Settings) -> None:
    """Our paid endpoint against the local sandbox vs the bare handler."""
    with market.sandbox() as ready, procs.server("bare") as bare:
        m = asyncio.run(market.build_market(ready))
        args = ("--service", m.base_url, "--key", m.builder_key, "--plan", m.plan_id)
        with procs.server("paid", *args) as paid:
            _warm(bare, None, s)
            _warm(paid, m.token, s)
            rps_bare = _run(report, "bare handler (sandbox case)", bare, None, HEADLINE_C, s)
            rps_paid = _run(report, "paid endpoint (sandbox)", paid, m.token, HEADLINE_C, s)
    report.figure(Figure("paid endpoint (sandbox) / bare handler", rps_paid, rps_bare, "c=32"))


def case_ledger(report: Report, s: Settings) -> None:
    """The sandbox's verify+settle rate on a fresh database vs after ``seed`` settles."""
    with tempfile.TemporaryDirectory(prefix="svc-bench-db-") as tmp:
        db = str(Path(tmp) / "sandbox.db")
        with market.sandbox(db) as ready:
            m = asyncio.run(market.build_market(ready))
            fresh, err1 = market.settle_rate(m, 8, s.settle_secs)
        market.seed_settles(db, m, s.seed)
        history = market.count_burns(db)
        with market.sandbox(db) as ready:
            m = dataclasses.replace(m, base_url=str(ready["baseUrl"]))
            aged, err2 = market.settle_rate(m, 8, s.settle_secs)
    print(
        f"  sandbox verify+settle: fresh {fresh:.1f}/s, after {history} settles {aged:.1f}/s "
        f"(failed pairs {err1 + err2})",
        flush=True,
    )
    report.rows.append(
        {"case": "sandbox verify+settle, fresh", "concurrency": 8, "rps": fresh, "errors": err1}
    )
    report.rows.append(
        {
            "case": f"sandbox verify+settle, {history} settles",
            "concurrency": 8,
            "rps": aged,
            "errors": err2,
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
        Target("<=", 1.25),
    )
    report.figure(
        Figure("context hook miss / bare client call", calls["context hook miss"].median_us, bare)
    )
    report.figure(
        Figure("context hook hit (µs) [hit / bare call]", hit, bare, absolute=hit, unit="µs"),
        Target("abs<=", 20.0),
    )
    imp = micro.measure_import(s.import_runs)
    base_ms, reg_ms = float(imp["baseline_ms"]), float(imp["register_ms"])  # type: ignore[arg-type]
    loaded = ", ".join(imp["modules"]) or "none"  # type: ignore[arg-type]
    print(f"  import aiohttp {base_ms:.0f} ms; import + register {reg_ms:.0f} ms; loaded {loaded}")
    report.rows.append({"case": "import + register", **imp})
    report.figure(
        Figure(
            "import + register (ms) [/ import aiohttp]",
            reg_ms,
            base_ms,
            absolute=reg_ms,
            unit="ms",
        ),
        Target("abs<=", 150.0),
    )


CASES = {"stub": case_stub, "sandbox": case_sandbox, "ledger": case_ledger, "micro": case_micro}


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny durations")
    parser.add_argument(
        "--only",
        default=",".join(CASES),
        help=f"comma-separated cases to run (default all: {','.join(CASES)})",
    )
    parser.add_argument("--duration", type=float, help="seconds per load run (default 3)")
    parser.add_argument("--seed", type=int, default=50_000, help="settles of history (ledger)")
    parser.add_argument(
        "--aiohttp-load", action="store_true", help="use the aiohttp generator even if wrk exists"
    )
    parser.add_argument("--out", default="benchmarks/results", help="where the JSON and PNG go")
    args = parser.parse_args(argv)
    cases = frozenset(c.strip() for c in args.only.split(",") if c.strip())
    unknown = cases - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; choose from {sorted(CASES)}")
    quick = args.quick
    settings = Settings(
        duration=args.duration or (1.0 if quick else 3.0),
        rounds=30 if quick else 300,
        import_runs=1 if quick else 5,
        seed=min(args.seed, 2_000) if quick else args.seed,
        settle_secs=1.0 if quick else 3.0,
        force_aiohttp=args.aiohttp_load,
        cases=cases,
    )
    return args, settings


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
            "quick": args.quick,
        }
    )
    print(
        f"svc benchmarks: {report.meta['cores']} cores, load by {generator}, "
        f"{settings.duration:g} s per load run{' (quick)' if args.quick else ''}",
        flush=True,
    )
    for name, case in CASES.items():
        if name in settings.cases:
            print(f"[{name}] {(case.__doc__ or '').strip().splitlines()[0]}", flush=True)
            case(report, settings)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print()
    print(report.table())
    (out / "results.json").write_text(json.dumps(report.as_json(), indent=2) + "\n")
    chart = report.chart(out / "benchmarks.png")
    print(f"\nwrote {out / 'results.json'}" + (f" and {chart}" if chart else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
