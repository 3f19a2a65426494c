"""Two trees of the plugin in one load run: ``python -m benchmarks.before_after <plugin dir>``.

The chain, and the paid endpoint and the route middleware of this checkout ("after") and of
another tree's ``plugin/`` directory ("before", e.g. a ``git archive`` of an older commit), all
against one stub facilitator, every side loaded in turn at 32 clients in rotating rounds (the
chain case's method, :func:`benchmarks.floor.medians`), so both trees see the same neighbours'
noise; prints each side's rate and CPU per request as a ratio of the chain's.
"""

from __future__ import annotations

import argparse
import tempfile
from contextlib import ExitStack
from pathlib import Path

from . import load, procs
from .floor import CHAIN_ROUNDS, CHAIN_SECS, HEADLINE_C, Side, medians, per_round, spread

TOKEN = "bench-token"


def compare(before: Path, rounds: int, duration: float, pin: bool = True) -> None:
    split = procs.cpu_split(pin)
    server_cpus, load_cpus = split if split else (None, None)
    with ExitStack() as stack:
        stack.enter_context(procs.pinned(load_cpus))
        stub = str(stack.enter_context(procs.spawn(["-m", "benchmarks.chain", "--stub"]))["url"])
        service = ["--service", stub + "/api/v1"]
        # the before tree gets its own config directory: each route server locks its queue file
        home = stack.enter_context(tempfile.TemporaryDirectory(prefix="svc-bench-before-"))
        old = {
            "PYTHONPATH": f"{before}:{procs.ROOT}",
            "HOME": home,
            "XDG_CONFIG_HOME": str(Path(home) / ".config"),
        }

        def up(label: str, args: list[str], env: dict[str, str] | None = None) -> Side:
            line = stack.enter_context(procs.spawn(args, env, cpus=server_cpus))
            return Side(label, str(line["url"]), TOKEN, int(line["pid"]))

        serve = ["-m", "benchmarks.serve"]
        sides = [
            up("the chain", ["-m", "benchmarks.chain", *service]),
            up("paid endpoint, after", [*serve, "paid", *service]),
            up("paid endpoint, before", [*serve, "paid", *service], old),
            up("middleware route, after", [*serve, "route", *service]),
            up("middleware route, before", [*serve, "route", *service], old),
        ]
        for side in sides:  # warm every pool and cache
            load.load(side.url, side.token, 4, 1)
        got = medians(sides, HEADLINE_C, rounds, duration, stub=stub)
    chain = got["the chain"]
    print(f"  pinned: {'no' if split is None else f'server on {server_cpus}, load on {load_cpus}'}")
    for label, measured in got.items():
        rate = measured.result.rps / chain.result.rps
        cpu = measured.cpu_us / chain.cpu_us
        print(f"  {label:<26} rate / chain {rate:6.3f}×   CPU per request / chain {cpu:6.3f}×")
        if measured is not chain:
            print(f"  {'':<26} round by round: rate {spread(per_round(measured, chain))}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.before_after")
    parser.add_argument("before", type=Path, help="the other tree's plugin/ directory")
    parser.add_argument("--rounds", type=int, default=CHAIN_ROUNDS)
    parser.add_argument("--duration", type=float, default=CHAIN_SECS)
    parser.add_argument("--no-pin", action="store_true", help="do not pin (see the chain case)")
    args = parser.parse_args(argv)
    compare(args.before.resolve(), args.rounds, args.duration, not args.no_pin)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
