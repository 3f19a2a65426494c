"""Deterministic profile of a server under load: ``python -m benchmarks --calls paid``.

py-spy (:mod:`.profile`) samples; this counts. The server (the chain, the paid endpoint or the
route middleware) runs in its own process with :mod:`cProfile` switched on, for the thread
that serves, only while the load runs (not during start-up and warm-up), against the stub
facilitator; afterwards the calls of every function are divided by the requests answered,
so two servers compare by *calls per request* and by own time per request (cProfile's own
overhead inflates the times, about equally on both sides; the counts are exact). The stats go
to ``calls-<kind>.prof`` (``python -m pstats``, snakeviz) under ``--out``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import load, procs

TOKEN = "bench-token"
KINDS = ("chain", "paid", "route")


@dataclass(frozen=True)
class Row:
    name: str
    calls: float  # per request
    own_us: float  # per request
    cum_us: float  # per request


def _name(func: tuple[str, int, str]) -> str:
    file, line, name = func
    if file == "~":
        return name  # a builtin: {method 'x' of 'y' objects}
    parts = Path(file).parts
    for root in ("svc_gateway", "aiohttp", "asyncio", "benchmarks", "pydantic", "yarl"):
        if root in parts:
            return "/".join(parts[parts.index(root) :]) + f":{line}({name})"
    return f"{Path(file).name}:{line}({name})"


def rows(stats: pstats.Stats, requests: int) -> list[Row]:
    """Every function's calls, own time and cumulative time, per request."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    out = []
    for func, (_cc, nc, tt, ct, _callers) in table.items():
        out.append(Row(_name(func), nc / requests, tt / requests * 1e6, ct / requests * 1e6))
    return out


def summary(path: Path, requests: int, top: int = 25) -> list[Row]:
    """Print the totals and the ``top`` functions by own time and by calls, per request."""
    stats = pstats.Stats(str(path))
    table = rows(stats, requests)
    calls = sum(r.calls for r in table)
    own = sum(r.own_us for r in table)
    print(f"  {requests} requests: {calls:,.0f} calls and {own:,.0f} µs (profiled) per request")
    print("  by own time per request:")
    for r in sorted(table, key=lambda r: -r.own_us)[:top]:
        print(f"    {r.own_us:8.1f} µs  {r.calls:6.1f}×  cum {r.cum_us:8.1f} µs  {r.name}")
    return table


# -- the server side: a server with cProfile switched on by a signal ---------------------------


def _serve(kind: str, service: str, out: Path) -> None:
    """Serve ``kind``; SIGUSR1 starts profiling the serving thread, SIGUSR2 stops it and
    writes ``out``, SIGTERM ends the process."""
    from .serve import fake_key

    profiler = cProfile.Profile()
    loop_holder: list[Any] = []

    def on_loop(fn: Any) -> None:
        loop_holder[0].call_soon_threadsafe(fn)

    def dump() -> None:
        profiler.disable()
        profiler.dump_stats(str(out))
        sys.stdout.write("dumped\n")
        sys.stdout.flush()

    if kind == "paid":
        from .serve import STUB_PLAN_ID, announce, paid_gateway

        with paid_gateway(service, fake_key(), STUB_PLAN_ID) as handle:
            loop_holder.append(handle.extras["paid_endpoint"].flow.seller.runtime.loop)
            stopped = threading.Event()
            signal.signal(signal.SIGUSR1, lambda *_: on_loop(profiler.enable))
            signal.signal(signal.SIGUSR2, lambda *_: on_loop(dump))
            signal.signal(signal.SIGTERM, lambda *_: stopped.set())
            announce(handle.extras["paid_endpoint"].url)
            stopped.wait()
        return

    import asyncio

    from .chain import chain_app
    from .serve import AGENT_PATH, STUB_PLAN_ID, route_app, serve_app

    app = (
        chain_app(service, STUB_PLAN_ID)
        if kind == "chain"
        else route_app(service, fake_key(), STUB_PLAN_ID)
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop_holder.append(loop)
        loop.add_signal_handler(signal.SIGUSR1, profiler.enable)
        loop.add_signal_handler(signal.SIGUSR2, dump)
        await serve_app(app, AGENT_PATH)

    asyncio.run(main())


# -- the driver -------------------------------------------------------------------------------


def _wait_line(proc_stdout: Any, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc_stdout.readline()
        if line.strip() == text:
            return
    raise RuntimeError(f"the server never said {text!r}")


def profile_calls(kind: str, out_dir: Path, duration: float, concurrency: int = 32) -> list[Row]:
    """Profile ``kind`` under ``concurrency`` clients for ``duration`` seconds."""
    import subprocess

    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"calls-{kind}.prof"
    out.unlink(missing_ok=True)
    with procs.server("stub") as stub:
        args = [sys.executable, "-m", "benchmarks.calls", "--serve", kind]
        args += ["--service", stub + "/api/v1", "--out", str(out)]
        proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, text=True, env=procs.child_env(), cwd=procs.ROOT
        )
        try:
            ready = procs.read_json_line(proc, procs.START_TIMEOUT_SECS)
            url = str(ready["url"])
            load.load(url, TOKEN, 4, 1)  # warm every pool and cache, unprofiled
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.2)
            result = load.load(url, TOKEN, concurrency, duration)
            proc.send_signal(signal.SIGUSR2)
            assert proc.stdout is not None
            _wait_line(proc.stdout, "dumped")
        finally:
            procs.stop(proc)
    print(f"[{kind}] {result.requests} answered ({result.errors} errors), {result.rps:,.0f}/s")
    return summary(out, result.requests)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.calls")
    parser.add_argument("kinds", nargs="*", default=list(KINDS), help=f"of {KINDS}")
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--service", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if args.serve:
        _serve(args.serve, args.service, Path(args.out))
        return 0
    os.environ.setdefault("PYTHONHASHSEED", "0")
    for kind in args.kinds:
        profile_calls(kind, Path(args.out), args.duration)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
