"""Instructions per answered request, counted: ``python -m benchmarks --only instructions``.

The load runs measure time, and on this shared 2-core machine a round's rate moves by ±30%
with the neighbours (the same tree measured the Redis book at 1.08× and 1.45× the in-process
book an hour apart), so a 15% target sits inside the noise. This counts instead: each server
runs under valgrind's callgrind with counting switched on only while 32 clients load it
(``callgrind_control``), against the same stub facilitator (and ``redis-server``), natively run;
the instructions it executed (callgrind's ``Ir``: this process's own, in user space; the
kernel's work on its sockets and the other processes' are not in it) divided by the requests it
answered. Rounds alternate the servers (counters zeroed before each); the figure is each
server's median round.

What it does not see: what an instruction costs (cache misses, which grow with the objects a
request keeps; the load runs see them), and the server runs about 30× slower under callgrind
while the stub and Redis do not, so the Redis book's calls ride shorter pipelines than under a
real load (more pipelines a request: the count is, if anything, against the Redis book).

Needs ``valgrind`` (Debian's package of that name).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from . import load, procs
from .report import Figure, Report, Target

#: the servers it can count, and how each is started (``{stub}``, ``{state}``: URLs)
KINDS: dict[str, list[str]] = {
    "chain": ["-m", "benchmarks.chain", "--service", "{stub}"],
    "chain-mw": ["-m", "benchmarks.chain", "--middleware", "--service", "{stub}"],
    "paid": ["-m", "benchmarks.serve", "paid", "--service", "{stub}"],
    "route": ["-m", "benchmarks.serve", "route", "--service", "{stub}"],
    "redis": ["-m", "benchmarks.serve", "paid", "--service", "{stub}", "--state-url", "{state}"],
}
#: the ratios reported, when both sides were counted: (label, side, base)
RATIOS = (
    ("paid endpoint / the chain", "paid", "chain"),
    ("middleware route / the chain", "route", "chain"),
    ("the chain as a middleware / the chain", "chain-mw", "chain"),
    ("middleware route / the chain as a middleware", "route", "chain-mw"),
    ("stateUrl (Redis) / in-process book", "redis", "paid"),
)
#: the bounds judged (issue 42: the paid endpoint at most 1.20× the chain's instructions)
TARGETS = {"paid endpoint / the chain": Target("<=", 1.20)}
TOKEN = "bench-token"
CLIENTS = 32
#: further rounds a count may take when a round answered nothing (a starved server)
MORE_ROUNDS = 3
#: coverage.py's variables that switch its tracer on in a child (``patch = ["subprocess"]``):
#: a counted server runs without it, or the tracer is what is counted
UNTRACED = ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START", "COVERAGE_RUN")


@dataclass
class Counted:
    """One server under callgrind: where its counts go, and each round's Ir per request."""

    kind: str
    url: str
    pid: int
    out: Path
    rounds: list[float]


def read_total(path: Path) -> int:
    """The instructions a callgrind dump counted (its ``totals:`` line, else ``summary:``)."""
    found: dict[str, int] = {}
    with path.open(errors="replace") as lines:
        for line in lines:
            for tag in ("totals:", "summary:"):
                if line.startswith(tag):
                    found[tag] = int(line.split()[1])
    if not found:
        raise ValueError(f"{path} has no totals or summary line: not a callgrind dump")
    return found.get("totals:", found.get("summary:", 0))


def newest_dump(out: Path) -> Path:
    """The newest of callgrind's dumps of ``out`` (``out.1``, ``out.2``, … one per dump)."""
    dumps = [p for p in out.parent.glob(out.name + ".*") if p.suffix[1:].isdigit()]
    if not dumps:
        raise RuntimeError(f"callgrind wrote no dump beside {out}")
    return max(dumps, key=lambda p: int(p.suffix[1:]))


def _control(pid: int, *flags: str) -> None:
    subprocess.run(["callgrind_control", *flags, str(pid)], check=True, capture_output=True)


def count_round(server: Counted, secs: float) -> float:
    """Zero the counters, count ``secs`` of load at :data:`CLIENTS` clients, dump: Ir a request."""
    _control(server.pid, "-z")
    _control(server.pid, "-i", "on")
    answered = 0
    # a busy machine can starve a server slowed ~50x by callgrind for a whole short round: the
    # count goes on (counters still on) for up to MORE_ROUNDS more rounds until one answers
    for _ in range(1 + MORE_ROUNDS):
        result = load.load(server.url, TOKEN, CLIENTS, secs)
        answered += result.requests - result.errors
        if answered > 0:
            break
    _control(server.pid, "-i", "off")
    _control(server.pid, "-d")
    if answered <= 0:
        raise RuntimeError(f"{server.kind} answered no request under callgrind")
    return read_total(newest_dump(server.out)) / answered


def start(kind: str, stack: ExitStack, folder: Path, stub: str, state: str | None) -> Counted:
    """``kind``'s server under callgrind (counting off), warmed without counting."""
    out = folder / f"callgrind-{kind}.out"
    prefix = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    prefix += [f"--callgrind-out-file={out}", "--dump-line=no", "--compress-strings=no"]
    args = [a.format(stub=stub, state=state or "") for a in KINDS[kind]]
    ready = stack.enter_context(procs.spawn(args, prefix=prefix, drop=UNTRACED))
    server = Counted(kind, str(ready["url"]), int(ready["pid"]), out, [])
    load.load(server.url, TOKEN, 4, 2.0)  # every pool and cache warm, uncounted
    return server


def measure(kinds: list[str], rounds: int, secs: float) -> dict[str, Counted]:
    """Each kind's Ir per answered request in ``rounds`` alternating rounds of ``secs``."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("valgrind is not installed (Debian: apt-get install valgrind)")
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="svc-ir-") as tmp:
        stub = str(stack.enter_context(procs.spawn(["-m", "benchmarks.chain", "--stub"]))["url"])
        state = stack.enter_context(procs.redis_server()) if "redis" in kinds else None
        servers = [start(k, stack, Path(tmp), stub + "/api/v1", state) for k in kinds]
        for _ in range(rounds):
            for server in servers:
                server.rounds.append(count_round(server, secs))
        return {server.kind: server for server in servers}


def ratios(counted: dict[str, Counted]) -> Iterator[tuple[str, float, float, float]]:
    """(label, median ratio, lowest, highest round's ratio) for each of :data:`RATIOS` counted."""
    for label, side, base in RATIOS:
        if side in counted and base in counted:
            pairs = [s / b for s, b in zip(counted[side].rounds, counted[base].rounds, strict=True)]
            yield label, statistics.median(pairs), min(pairs), max(pairs)


def case(report: Report, rounds: int, secs: float, kinds: list[str] | None = None) -> None:
    """Instructions per answered request under callgrind: the paid endpoint, the route
    middleware and the Redis book against the chain (and the chain as a middleware)."""
    counted = measure(kinds or list(KINDS), rounds, secs)
    for kind, server in counted.items():
        shown = ", ".join(f"{v / 1e6:.3f}" for v in server.rounds)
        median = statistics.median(server.rounds)
        print(f"  {kind:<8} {median / 1e6:6.3f} M instructions a request (rounds: {shown})")
        report.rows.append(
            {"case": f"instructions: {kind}", "ir_per_request": median, "rounds": server.rounds}
        )
    for label, median, low, high in ratios(counted):
        print(f"  {label:<46} {median:.3f}x ({low:.3f}-{high:.3f}x)")
        side, base = next((s, b) for name, s, b in RATIOS if name == label)
        figure = Figure(
            f"instructions: {label}",
            statistics.median(counted[side].rounds),
            statistics.median(counted[base].rounds),
            f"rounds {low:.3f}–{high:.3f}×",
        )
        report.figure(figure, TARGETS.get(label))
